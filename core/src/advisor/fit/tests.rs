use super::*;
use crate::catalog::Snapshot;

const GB: f64 = 1e9;

fn inference(params: &str, precision: Precision, context: u32) -> FitRequest {
    FitRequest::params(parse_params(params).unwrap(), params)
        .unwrap()
        .with_precision(precision)
        .with_workload(Workload::Inference { context, batch: 1 })
}

#[test]
fn seven_billion_weights_match_the_published_figures() {
    for (p, gb) in [
        (Precision::Fp16, 14.0),
        (Precision::Int8, 7.0),
        (Precision::Int4, 3.5),
    ] {
        let m = inference("7B", p, 4096).memory().unwrap();
        let w = m.line("weights") as f64 / GB;
        assert!((w - gb).abs() < 0.05, "{p:?}: {w} GB");
    }
}

#[test]
fn seventy_billion_int8_fits_one_80gb_gpu_for_short_contexts_only() {
    let m = inference("70B", Precision::Int8, 4096).memory().unwrap();
    assert!(m.total_bytes() <= 80.0 * GIB, "{}", m.total_bytes() / GIB);
    let long = inference("70B", Precision::Int8, 32_768).memory().unwrap();
    assert!(long.total_bytes() > 80.0 * GIB);
    let fp16 = inference("70B", Precision::Fp16, 4096).memory().unwrap();
    assert!(fp16.total_bytes() > 80.0 * GIB);
    assert!(fp16.per_gpu_bytes(2) <= 80.0 * GIB);
}

#[test]
fn grouped_query_attention_shrinks_the_kv_cache() {
    let mha = FitRequest::preset(preset("llama-2-7b").unwrap());
    let gqa = FitRequest::preset(preset("mistral-7b").unwrap());
    let kv = |r: &FitRequest| r.memory().unwrap().line("kv cache");
    // 32 KV heads against 8: four times the cache.
    assert_eq!(kv(&mha), 4 * kv(&gqa));
    // Llama 2 7B at fp16, 4096 tokens: 2 GiB of cache (the well-known 0.5 MiB per token).
    assert_eq!(kv(&mha), 2 * 32 * 32 * 128 * 4096 * 2);
}

#[test]
fn full_training_needs_sixteen_bytes_per_parameter_before_activations() {
    let r = inference("7B", Precision::Bf16, 1).with_workload(Workload::Training {
        method: TrainingMethod::Full,
        context: 2048,
        batch: 1,
        activation_checkpointing: true,
    });
    let m = r.memory().unwrap();
    let states = m.line("weights") + m.line("gradients") + m.line("optimizer states");
    assert_eq!(states, 16 * 7_000_000_000);
    let lora = r
        .clone()
        .with_workload(Workload::Training {
            method: TrainingMethod::Lora,
            context: 2048,
            batch: 1,
            activation_checkpointing: true,
        })
        .memory()
        .unwrap();
    assert!(lora.total_bytes() < m.total_bytes() / 4.0);
    let int4 = r.with_precision(Precision::Int4).memory().unwrap_err();
    assert!(int4.to_string().contains("lora"), "{int4}");
}

#[test]
fn checkpointing_cuts_activations() {
    let w = |ckpt| Workload::Training {
        method: TrainingMethod::Full,
        context: 4096,
        batch: 1,
        activation_checkpointing: ckpt,
    };
    let p = preset("llama-2-7b").unwrap();
    let on = FitRequest::preset(p)
        .with_workload(w(true))
        .memory()
        .unwrap();
    let off = FitRequest::preset(p)
        .with_workload(w(false))
        .memory()
        .unwrap();
    // 34 x 32 layers x 4096 x 4096 bytes without; (2 x 32 + 34) x ... with.
    assert_eq!(off.line("activations"), 34 * 32 * 4096 * 4096);
    assert_eq!(on.line("activations"), (2 * 32 + 34) * 4096 * 4096);
}

#[test]
fn bad_inputs_are_named() {
    for bad in ["0", "-7B", "abc", "", "7X", "1e400", "12"] {
        let e = parse_params(bad).unwrap_err().to_string();
        assert!(e.contains(&format!("'{bad}'")), "{e}");
    }
    assert_eq!(parse_params("1.3e9").unwrap(), 1.3e9);
    assert_eq!(parse_params("350M").unwrap(), 350e6);
    let e = Precision::parse("fp12").unwrap_err().to_string();
    assert!(e.contains("fp12") && e.contains("bf16"), "{e}");
    let e = preset("llama-9").unwrap_err().to_string();
    assert!(e.contains("llama-9") && e.contains("llama-"), "{e}");
    let zero = inference("7B", Precision::Bf16, 0).memory().unwrap_err();
    assert!(zero.to_string().contains("context 0"), "{zero}");
    let zero_layers = inference("7B", Precision::Bf16, 10)
        .with_layers(0)
        .memory()
        .unwrap_err();
    assert!(zero_layers.to_string().contains("layers 0"));
}

#[test]
fn configurations_come_cheapest_first_and_only_pool_gpus_over_nvlink() {
    let offers = Snapshot::embedded().offers();
    // 70B at fp16 needs about 150 GiB: never one GPU, never PCIe pooling.
    let r = inference("70B", Precision::Fp16, 4096);
    let report = fit(&r, offers, &FitOptions::default()).unwrap();
    assert!(!report.configs.is_empty());
    for w in report.configs.windows(2) {
        let key = |c: &FitConfig| (c.on_demand_per_hour.is_none(), c.rank_price());
        assert!(key(&w[0]) <= key(&w[1]));
    }
    for c in &report.configs {
        assert!(c.gpus_used >= 2, "{c:?}");
        assert!(c.utilisation <= 1.0, "{c:?}");
        assert!(!c.layout.contains("1 of"), "{c:?}");
        let t = offers
            .iter()
            .find(|o| o.instance_type.name == c.instance_type)
            .unwrap();
        assert_ne!(
            t.instance_type.interconnect.gpu_link,
            GpuLink::Pcie,
            "{c:?}"
        );
    }
    // A 7B model at int4 fits a single T4-class GPU; the cheapest is a 1-GPU type.
    let small = fit(
        &inference("7B", Precision::Int4, 2048),
        offers,
        &FitOptions::default(),
    )
    .unwrap();
    assert_eq!(small.configs[0].gpus_used, 1);
    assert_eq!(small.configs[0].gpus_per_node, 1);
}

#[test]
fn a_model_too_big_for_one_node_spans_nodes_only_over_a_fabric() {
    let offers = Snapshot::embedded().offers();
    let r =
        FitRequest::preset(preset("llama-3.1-405b").unwrap()).with_workload(Workload::Training {
            method: TrainingMethod::Full,
            context: 4096,
            batch: 1,
            activation_checkpointing: true,
        });
    let report = fit(&r, offers, &FitOptions::default()).unwrap();
    assert!(!report.configs.is_empty());
    for c in &report.configs {
        assert!(c.nodes > 1, "{c:?}");
        let t = offers
            .iter()
            .find(|o| o.instance_type.name == c.instance_type)
            .unwrap();
        assert!(t.instance_type.interconnect.multi_node_capable(), "{c:?}");
    }
    let at_most = |max_nodes| FitOptions {
        max_nodes,
        ..FitOptions::default()
    };
    let one_node = fit(&r, offers, &at_most(1)).unwrap();
    assert!(one_node.configs.is_empty());
    assert!(one_node.too_small > 0);
    // The cap is bounded, and at the bound nothing overflows: `--max-nodes
    // 4000000000` panicked multiplying GPUs by nodes.
    for bad in [0, MAX_NODES_LIMIT + 1, u32::MAX] {
        let e = fit(&r, offers, &at_most(bad)).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
        assert!(
            e.to_string()
                .contains(&format!("max nodes {bad}: use 1 to 4096")),
            "{e}"
        );
    }
    let huge = inference("70B", Precision::Bf16, 1_000_000_000);
    let most = fit(&huge, offers, &at_most(MAX_NODES_LIMIT)).unwrap();
    assert!(most.configs.is_empty() && most.too_small > 0);
    // What it says to do names only levers not already at their end.
    assert_eq!(
        most.levers(MAX_NODES_LIMIT),
        "lower --precision, or lower --context or --batch"
    );
    let lora_int4 = FitRequest::params(70e9, "70B")
        .unwrap()
        .with_precision(Precision::Int4)
        .with_workload(Workload::Training {
            method: TrainingMethod::Lora,
            context: 1_000_000_000,
            batch: 1,
            activation_checkpointing: false,
        });
    let none = fit(&lora_int4, offers, &FitOptions::default()).unwrap();
    assert_eq!(
        none.levers(16),
        "lower --context or --batch, drop --no-activation-checkpointing, or raise --max-nodes (up to 4096)"
    );
    let full = fit(&r, offers, &FitOptions::default()).unwrap();
    assert!(
        full.levers(16).contains("use --training lora"),
        "{}",
        full.levers(16)
    );
}
