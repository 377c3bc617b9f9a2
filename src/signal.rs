//! Process signals: SIGTERM and SIGINT start the drain; SIGHUP re-reads the config file through the one reload path.

use std::sync::Arc;

use tokio::signal::unix::{SignalKind, signal};

use crate::config::ConfigStore;

/// Waits for SIGTERM or SIGINT and returns its name.
pub async fn terminated() -> &'static str {
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        // Without signal handlers the process can only be killed; wait forever rather than exit at once.
        std::future::pending::<()>().await;
        return "none";
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

/// Reloads the configuration on every SIGHUP, for as long as the runtime lives.
pub fn reload_on_hangup(store: Arc<ConfigStore>) {
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot install the SIGHUP handler; reload by editing the file instead");
        return;
    };
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP received; reloading the configuration");
            let store = Arc::clone(&store);
            let _ = crate::config::background::run("mcpgw-reload", move || store.reload()).await;
        }
    });
}
