//! Issue 15 item 2 (the lock-wait half): while `up` or `down` waits for
//! another labctl's lock, the async runtime keeps running its other tasks.
//! Checked on a one-thread runtime, where a wait that sleeps the thread
//! would stop every other task for as long as it waits.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lab_core::lab::{Lab, LabError};
use lab_state::StateError;

#[test]
fn test_down_waiting_for_the_lock_leaves_the_runtime_running() {
    let base = std::env::temp_dir().join(format!(
        "labctl-lock-wait-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&base).unwrap();
    let labs = base.join("labs.yaml");
    std::fs::write(
        &labs,
        "labs:\n  - name: waits\n    nodes:\n      - name: a\n      - name: b\n",
    )
    .unwrap();
    let lab = Lab::open(&labs, None).unwrap();
    // Another labctl holds the lab (a separate open of the lock file
    // contends exactly like another process).
    let held = lab.dir.lock(Duration::ZERO).unwrap();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ticks = Arc::new(AtomicU32::new(0));
    let result = runtime.block_on(async {
        let ticker = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    ticks.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let result = lab.down(Duration::from_millis(1000)).await;
        ticker.abort();
        result
    });
    match result {
        Err(LabError::State(StateError::Busy { lab, .. })) => assert_eq!(lab, "waits"),
        other => panic!("expected Busy, got {other:?}"),
    }
    // 1 s of waiting at one tick per 20 ms: about 50 ticks when the wait is
    // off the runtime; none or one when it sleeps the runtime's thread.
    let ticks = ticks.load(Ordering::Relaxed);
    eprintln!("the runtime ran {ticks} ticks of 20 ms during a 1 s lock wait");
    assert!(ticks >= 20, "the runtime ran only {ticks} ticks during a 1 s lock wait");
    drop(held);
    std::fs::remove_dir_all(base).unwrap();
}
