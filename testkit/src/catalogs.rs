//! Catalogs the executor tests run on, and the launch template that goes
//! with them.

use gpufleet_core::Cloud;
use gpufleet_runtime::LaunchTemplate;

/// One node from an image named on each of the three fake clouds.
pub fn three_cloud_template() -> LaunchTemplate {
    let images = [
        (Cloud::Aws, "ami-1"),
        (Cloud::Gcp, "img-1"),
        (Cloud::Azure, "urn-1"),
    ];
    LaunchTemplate {
        images: images
            .into_iter()
            .map(|(c, i)| (c, i.to_string()))
            .collect(),
        nodes: 1,
        ..LaunchTemplate::default()
    }
}

/// One 8x A100 type on each of three fake clouds, spot and on-demand: spot
/// cheapest on AWS, then GCP, then Azure; on-demand the other way round.
pub const THREE_CLOUD_A100: &str = "#gpufleet-catalog 1
source,t,fake,test-prices,2026-01-01T00:00:00Z
type,aws,p4d.24xlarge,A100,8,40,96,1179648,nvswitch,efa,400
type,gcp,a2-highgpu-8g,A100,8,40,96,696320,nvswitch,standard,100
type,azure,Standard_ND96asr_v4,A100,8,40,96,921600,nvswitch,infiniband,1600
offer,aws,us-east-1,use1-az1,p4d.24xlarge,spot,8.00,t,1
offer,aws,us-east-1,use1-az1,p4d.24xlarge,on-demand,32.77,t,-
offer,gcp,us-central1,us-central1-a,a2-highgpu-8g,spot,9.00,t,-
offer,gcp,us-central1,us-central1-a,a2-highgpu-8g,on-demand,29.39,t,-
offer,azure,eastus,-,Standard_ND96asr_v4,spot,10.00,t,-
offer,azure,eastus,-,Standard_ND96asr_v4,on-demand,27.20,t,-
";
