//! Shutdown through a `CancellationToken` tree: the root is cancelled on SIGTERM or
//! ctrl-c; every task takes a `child_token()`.

use tokio_util::sync::CancellationToken;

/// Resolves at the first SIGTERM or ctrl-c (SIGINT).
pub async fn wait_for_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("ctrl-c received, shutting down"),
        _ = term => tracing::info!("SIGTERM received, shutting down"),
    }
}

/// A root token cancelled by the first SIGTERM / ctrl-c. Must be called inside a
/// tokio runtime.
pub fn shutdown_on_signals() -> CancellationToken {
    // SIGTERM's handler is installed here, before this returns, not in the spawned
    // task: a SIGTERM that arrives once the process serves (a rolling restart right
    // after a start) must shut it down cleanly, not kill it by the default action.
    #[cfg(unix)]
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM");
            None
        }
    };
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        let term = async {
            match term.as_mut() {
                Some(s) => {
                    s.recv().await;
                    tracing::info!("SIGTERM received, shutting down");
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = wait_for_signal() => t.cancel(),
            _ = term => t.cancel(),
            _ = t.cancelled() => {}
        }
    });
    token
}
