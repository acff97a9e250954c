//! Smoke test of the real broker (cluster A): Kafka transactions work end to end, the
//! guarantee the audit service's exactly-once counting rests on (docs/design.md §5).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

const PARTITIONS: i32 = 2;
const PER_PARTITION: i64 = 5;
/// Records of each input partition processed (and committed) in the transaction.
const PROCESSED: i64 = 3;
const TIMEOUT: Duration = Duration::from_secs(30);

fn consumer(bootstrap: &str, group: &str, isolation: &str) -> BaseConsumer {
    testkit::client_config(bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", isolation)
        .set("enable.partition.eof", "true")
        .create()
        .expect("consumer")
}

/// Polls until every partition of `topic` reached its end (as seen at the consumer's
/// isolation level); returns `(partition, offset, payload)` of everything read.
fn read_to_end(consumer: &BaseConsumer, topic: &str) -> Vec<(i32, i64, String)> {
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut records = Vec::new();
    let mut at_end = BTreeSet::new();
    let deadline = Instant::now() + TIMEOUT;
    while at_end.len() < PARTITIONS as usize {
        assert!(
            Instant::now() < deadline,
            "{topic}: end not reached in {TIMEOUT:?}, read {records:?}"
        );
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                let payload =
                    String::from_utf8(m.payload().expect("payload").to_vec()).expect("utf-8");
                records.push((m.partition(), m.offset(), payload));
            }
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                at_end.insert(partition);
            }
            Some(Err(e)) => panic!("consume {topic}: {e}"),
        }
    }
    records
}

fn payloads(records: &[(i32, i64, String)]) -> BTreeSet<String> {
    records.iter().map(|(_, _, p)| p.clone()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn transaction_commits_records_with_offsets_and_hides_aborted_records() {
    let bootstrap = testkit::kafka_a();
    let input = testkit::create_unique_topic(&bootstrap, "smoke-in", PARTITIONS).await;
    let output = testkit::create_unique_topic(&bootstrap, "smoke-out", PARTITIONS).await;
    let group = testkit::unique("smoke-group");

    // Plain records to process: PER_PARTITION in each input partition.
    let plain: BaseProducer = testkit::client_config(&bootstrap)
        .create()
        .expect("producer");
    for partition in 0..PARTITIONS {
        for i in 0..PER_PARTITION {
            let payload = format!("in-{partition}-{i}");
            plain
                .send(
                    BaseRecord::<(), _>::to(&input)
                        .partition(partition)
                        .payload(&payload),
                )
                .expect("enqueue");
        }
    }
    plain.flush(TIMEOUT).expect("flush");

    // A member of `group` reads the input; the first PROCESSED records of each partition
    // are "processed".
    let reader = consumer(&bootstrap, &group, "read_committed");
    reader.subscribe(&[input.as_str()]).expect("subscribe");
    let mut next = BTreeMap::new();
    let deadline = Instant::now() + TIMEOUT;
    while next.len() < PARTITIONS as usize || next.values().any(|&o| o < PROCESSED) {
        assert!(
            Instant::now() < deadline,
            "input not read in {TIMEOUT:?}: {next:?}"
        );
        match reader.poll(Duration::from_millis(100)) {
            Some(Ok(m)) if m.offset() < PROCESSED => {
                next.insert(m.partition(), m.offset() + 1);
            }
            Some(Ok(_)) | Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => panic!("consume {input}: {e}"),
        }
    }

    let producer: BaseProducer = testkit::client_config(&bootstrap)
        .set("transactional.id", testkit::unique("smoke-txn"))
        .create()
        .expect("transactional producer");
    producer
        .init_transactions(TIMEOUT)
        .expect("init_transactions");

    // Transaction 1: the results of the processed records and the consumer offsets, atomically.
    producer.begin_transaction().expect("begin");
    let mut committed = BTreeSet::new();
    for partition in 0..PARTITIONS {
        for i in 0..PROCESSED {
            let payload = format!("committed-{partition}-{i}");
            producer
                .send(
                    BaseRecord::<(), _>::to(&output)
                        .partition(partition)
                        .payload(&payload),
                )
                .expect("enqueue");
            committed.insert(payload);
        }
    }
    let mut offsets = TopicPartitionList::new();
    for (&partition, &offset) in &next {
        offsets
            .add_partition_offset(&input, partition, Offset::Offset(offset))
            .expect("offset");
    }
    let metadata = reader.group_metadata().expect("group metadata");
    producer
        .send_offsets_to_transaction(&offsets, &metadata, TIMEOUT)
        .expect("send_offsets_to_transaction");
    producer.commit_transaction(TIMEOUT).expect("commit");

    // Transaction 2: aborted; its records are written to the log but must stay invisible.
    producer.begin_transaction().expect("begin");
    let mut aborted = BTreeSet::new();
    for partition in 0..PARTITIONS {
        let payload = format!("aborted-{partition}");
        producer
            .send(
                BaseRecord::<(), _>::to(&output)
                    .partition(partition)
                    .payload(&payload),
            )
            .expect("enqueue");
        aborted.insert(payload);
    }
    producer.flush(TIMEOUT).expect("flush");
    producer.abort_transaction(TIMEOUT).expect("abort");

    // Transaction 3: committed after the aborted one, so readers must skip over it.
    producer.begin_transaction().expect("begin");
    for partition in 0..PARTITIONS {
        let payload = format!("after-abort-{partition}");
        producer
            .send(
                BaseRecord::<(), _>::to(&output)
                    .partition(partition)
                    .payload(&payload),
            )
            .expect("enqueue");
        committed.insert(payload);
    }
    producer.commit_transaction(TIMEOUT).expect("commit");
    drop(reader);

    // Another group, read_committed: exactly the committed records.
    let seen = read_to_end(
        &consumer(&bootstrap, &testkit::unique("smoke-rc"), "read_committed"),
        &output,
    );
    assert_eq!(
        payloads(&seen),
        committed,
        "read_committed consumer of {output}"
    );
    assert_eq!(seen.len(), committed.len(), "no record twice: {seen:?}");

    // The aborted records are in the log: a read_uncommitted reader sees them. This keeps
    // the check above from passing on a broker that silently dropped them.
    let all = payloads(&read_to_end(
        &consumer(&bootstrap, &testkit::unique("smoke-ru"), "read_uncommitted"),
        &output,
    ));
    assert!(
        aborted.is_subset(&all),
        "read_uncommitted consumer sees the aborted records: {all:?}"
    );

    // The first group resumes exactly at the offsets committed in transaction 1.
    let resumed = consumer(&bootstrap, &group, "read_committed");
    let mut assignment = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        assignment.add_partition(&input, partition);
    }
    let stored = resumed
        .committed_offsets(assignment, TIMEOUT)
        .expect("committed offsets");
    for (&partition, &offset) in &next {
        let element = stored.find_partition(&input, partition).expect("partition");
        assert_eq!(
            element.offset(),
            Offset::Offset(offset),
            "committed offset of {input}/{partition}"
        );
    }
    let first: BTreeMap<i32, i64> = read_to_end(&resumed, &input).into_iter().fold(
        BTreeMap::new(),
        |mut first, (partition, offset, _)| {
            first.entry(partition).or_insert(offset);
            first
        },
    );
    let expected: BTreeMap<i32, i64> = next.clone();
    assert_eq!(
        first, expected,
        "first offsets read by the group after the transaction"
    );
}

#[test]
fn a_second_producer_with_the_same_transactional_id_fences_the_first() {
    let bootstrap = testkit::kafka_a();
    let topic = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(testkit::create_unique_topic(&bootstrap, "smoke-fence", 1));
    let id = testkit::unique("smoke-fence-txn");
    let make = || -> BaseProducer {
        let producer: BaseProducer = testkit::client_config(&bootstrap)
            .set("transactional.id", &id)
            .create()
            .expect("producer");
        producer
            .init_transactions(TIMEOUT)
            .expect("init_transactions");
        producer
    };
    let zombie = make();
    zombie.begin_transaction().expect("begin");
    zombie
        .send(BaseRecord::<(), _>::to(&topic).payload("zombie"))
        .expect("enqueue");
    zombie.flush(TIMEOUT).expect("flush");

    let _successor = make();
    let error = zombie
        .commit_transaction(TIMEOUT)
        .expect_err("the fenced producer must not commit");
    let fenced = matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
        )
    ) || error.to_string().to_lowercase().contains("fenced");
    assert!(fenced, "expected a fencing error, got {error}");
}
