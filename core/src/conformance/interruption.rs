//! The interruption stream check.

use super::*;

/// A preemption notice arrives once, with a deadline.
pub async fn check_interruption_stream(h: &dyn Harness) -> Outcome {
    let p = h.provider().await;
    let caps = p.capabilities();
    if let Some(s) = skip_unless(
        caps.interruptions && caps.compute && caps.catalog,
        "no interruption stream",
    ) {
        return s;
    }
    let offer = launch_pool(p.as_ref(), caps, Capacity::Spot).await;
    let launched = p
        .launch(&request(h, &offer, &unique("job")))
        .await
        .unwrap_or_else(|e| panic!("launch: {e}"));
    let inst = launched[0].clone();
    let mut stream = p
        .interruptions()
        .await
        .unwrap_or_else(|e| panic!("interruptions: {e}"));
    match h.trigger_preemption(&inst).await {
        None => return Outcome::Skipped("the harness cannot trigger a preemption".into()),
        Some(r) => r.unwrap_or_else(|e| panic!("triggering a preemption: {e}")),
    }
    let notice = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap_or_else(|_| panic!("no notice within 10 s of a preemption"))
        .unwrap_or_else(|| panic!("the notice stream ended"))
        .unwrap_or_else(|e| panic!("notice stream error: {e}"));
    assert_eq!(notice.kind, NoticeKind::Preemption);
    assert!(
        notice.deadline.is_some(),
        "a preemption notice without a deadline"
    );
    if let Some(id) = &notice.instance {
        assert_eq!(id, &inst.id, "the notice names another instance");
    }
    let again = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
    assert!(
        !matches!(again, Ok(Some(Ok(ref n))) if *n == notice),
        "the same notice was delivered twice"
    );
    let _ = p.terminate(&inst.id).await;
    Outcome::Passed
}
