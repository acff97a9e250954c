//! The benchmark's Kafka side: its topics (created, and deleted by `cleanup`) and the
//! producer that fills them.

use std::time::{Duration, Instant};

use anyhow::bail;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord};

pub(crate) fn create_topics(
    bootstrap: &str,
    topics: &[String],
    partitions: i32,
) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for chunk in topics.chunks(200) {
        let nts: Vec<NewTopic> = chunk
            .iter()
            .map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(1)))
            .collect();
        let res = rt.block_on(admin.create_topics(
            &nts,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(60))),
        ))?;
        for r in res {
            if let Err((t, e)) = r {
                bail!("create topic {t}: {e}");
            }
        }
    }
    // wait for leaders
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let md = admin
            .inner()
            .fetch_metadata(None, Duration::from_secs(30))?;
        let ready = md
            .topics()
            .iter()
            .filter(|t| topics.iter().any(|x| x == t.name()))
            .filter(|t| {
                t.error().is_none()
                    && t.partitions().len() == partitions as usize
                    && t.partitions().iter().all(|p| p.leader() >= 0)
            })
            .count();
        if ready == topics.len() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {ready} of {} topics ready", topics.len());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub(crate) fn producer(bootstrap: &str) -> anyhow::Result<BaseProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .create()?)
}

pub(crate) fn send(p: &BaseProducer, topic: &str, partition: Option<i32>, key: &str, value: &str) {
    let mut rec = BaseRecord::to(topic).key(key).payload(value);
    if let Some(pt) = partition {
        rec = rec.partition(pt);
    }
    loop {
        match p.send(rec) {
            Ok(()) => return,
            Err((_, r)) => {
                rec = r;
                p.poll(Duration::from_millis(5));
            }
        }
    }
}

pub(crate) fn cleanup(bootstrap: &str) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let md = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(30))?;
    let names: Vec<String> = md
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .filter(|n| {
            ["bench-tp-", "bench-rss-", "bench-audit-"]
                .iter()
                .any(|p| n.starts_with(p))
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for chunk in names.chunks(500) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        for r in rt.block_on(admin.delete_topics(
            &refs,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(60))),
        ))? {
            if let Err((t, e)) = r {
                eprintln!("cannot delete {t}: {e}");
            }
        }
    }
    println!("cleanup: deleted {} benchmark topics", names.len());
    Ok(())
}
