//! Smoke test of the two dev clusters: they are independent, and records produced on A,
//! consumed there and produced again on B arrive intact (the regional -> aggregate hop).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

const RECORDS: usize = 100;
const PARTITIONS: i32 = 3;
const TIMEOUT: Duration = Duration::from_secs(30);

type Record = (Vec<u8>, Vec<u8>);

fn consume(bootstrap: &str, topic: &str, count: usize) -> Vec<Record> {
    let consumer: BaseConsumer = testkit::client_config(bootstrap)
        .set("group.id", testkit::unique("smoke-two"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut records = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while records.len() < count {
        assert!(
            Instant::now() < deadline,
            "{topic} on {bootstrap}: {} of {count} records in {TIMEOUT:?}",
            records.len()
        );
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => records.push((
                m.key().expect("key").to_vec(),
                m.payload().expect("payload").to_vec(),
            )),
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => panic!("consume {topic} on {bootstrap}: {e}"),
        }
    }
    // Nothing beyond what was produced.
    if let Some(Ok(m)) = consumer.poll(Duration::from_millis(500)) {
        panic!(
            "{topic} on {bootstrap}: unexpected extra record at offset {}",
            m.offset()
        );
    }
    records
}

fn produce(bootstrap: &str, topic: &str, records: &[Record]) {
    let producer: BaseProducer = testkit::client_config(bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    for (key, payload) in records {
        producer
            .send(BaseRecord::to(topic).key(key).payload(payload))
            .unwrap_or_else(|(e, _)| panic!("enqueue to {topic} on {bootstrap}: {e}"));
    }
    producer.flush(TIMEOUT).expect("flush");
}

#[tokio::test(flavor = "multi_thread")]
async fn records_cross_from_cluster_a_to_cluster_b_intact() {
    let a = testkit::kafka_a();
    let b = testkit::kafka_b();
    let cluster_id = |bootstrap: &str| {
        let consumer: BaseConsumer = testkit::client_config(bootstrap).create().expect("client");
        consumer
            .client()
            .fetch_cluster_id(TIMEOUT)
            .expect("cluster id")
    };
    assert_ne!(
        cluster_id(&a),
        cluster_id(&b),
        "A and B must be two clusters"
    );

    // The same topic name on both clusters, as a replicator keeps it.
    let topic = testkit::unique("smoke-hop");
    testkit::create_topic(&a, &topic, PARTITIONS).await;
    testkit::create_topic(&b, &topic, PARTITIONS).await;

    let sent: Vec<Record> = (0..RECORDS)
        .map(|i| {
            (
                format!("key-{i}").into_bytes(),
                format!("{{\"ts\":{i},\"n\":{i}}}").into_bytes(),
            )
        })
        .collect();
    produce(&a, &topic, &sent);
    let on_a = consume(&a, &topic, RECORDS);
    produce(&b, &topic, &on_a);
    let on_b = consume(&b, &topic, RECORDS);

    let sent: BTreeSet<Record> = sent.into_iter().collect();
    assert_eq!(
        on_a.iter().cloned().collect::<BTreeSet<_>>(),
        sent,
        "consumed from A"
    );
    assert_eq!(
        on_b.iter().cloned().collect::<BTreeSet<_>>(),
        sent,
        "consumed from B"
    );
}
