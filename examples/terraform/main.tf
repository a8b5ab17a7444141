# Let gpufleet pick where an 8xA100 spot job is cheapest to finish, then launch
# it with the AWS provider. `gpufleet` must be on PATH (cargo install --path cli).
#
#   terraform init && terraform plan
#
# Terraform's `external` data source runs `gpufleet tf-external` with the
# query below as a JSON object of strings on stdin, and reads a flat JSON
# object of strings back (see the README for every key).

terraform {
  required_providers {
    aws      = { source = "hashicorp/aws", version = "~> 5.0" }
    external = { source = "hashicorp/external", version = "~> 2.3" }
  }
}

data "external" "gpu" {
  program = ["gpufleet", "tf-external"]
  query = {
    gpu       = "A100:8"
    clouds    = "aws"
    regions   = "us-east-1,us-west-2"
    capacity  = "spot"
    hours     = "20"
    deadline  = "48h"
    max_price = "40"
  }
}

provider "aws" {
  region = data.external.gpu.result.region
}

# gpufleet answers with the AZ ID (the same in every account); the instance
# needs this account's zone name for it.
data "aws_availability_zone" "chosen" {
  zone_id = data.external.gpu.result.zone
}

resource "aws_instance" "trainer" {
  ami               = var.ami
  instance_type     = data.external.gpu.result.instance_type
  availability_zone = data.aws_availability_zone.chosen.name

  dynamic "instance_market_options" {
    for_each = data.external.gpu.result.capacity == "spot" ? [1] : []
    content {
      market_type = "spot"
      spot_options {
        spot_instance_type             = "one-time"
        instance_interruption_behavior = "terminate"
      }
    }
  }

  tags = {
    "gpufleet:managed" = "true"
    "gpufleet:job"     = "train-42"
    "gpufleet:owner"   = "platform"
  }
}

variable "ami" {
  description = "A GPU AMI in the chosen region (for example the AWS Deep Learning AMI)."
  type        = string
}

output "placement" {
  value = {
    where          = "${data.external.gpu.result.region}/${data.external.gpu.result.zone}"
    instance_type  = data.external.gpu.result.instance_type
    price_per_hour = data.external.gpu.result.price_per_hour_usd
    expected_cost  = data.external.gpu.result.expected_cost_usd
    why            = data.external.gpu.result.explanation
  }
}
