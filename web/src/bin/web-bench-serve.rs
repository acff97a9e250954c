//! `web::run` without the rest of the `kafka-audit` binary (no Kafka client to build):
//! what bench/ scripts start, in release mode, to measure the API alone.
//! Usage: `serve CONFIG.toml`. Same configuration as `kafka-audit serve --config`.

fn main() -> anyhow::Result<()> {
    let path = std::env::args_os()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: serve CONFIG.toml"))?;
    let config = web::Config::load(Some(std::path::Path::new(&path)))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let shutdown = tokio_util::sync::CancellationToken::new();
        let token = shutdown.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            token.cancel();
        });
        #[cfg(unix)]
        {
            let token = shutdown.clone();
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::spawn(async move {
                term.recv().await;
                token.cancel();
            });
        }
        web::run(config, web::Mode::All, shutdown).await
    })
}
