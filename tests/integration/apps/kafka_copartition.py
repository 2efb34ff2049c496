"""Test app: joins co-partitioned with Kafka topics keyed by Kafka Strings (UTF-8 bytes,
placed by Kafka's default partitioner: murmur2 of those bytes), in the cluster at
$KAFKA_TEST_BOOTSTRAP, topics named with $KAFKA_TEST_ID. Orders (String keys, JSON
values) are re-keyed by their customer and joined with the customers table three ways,
each through internal topics with String keys: select_key + repartition + stream-table
join; select_key + stream-table join with Joined's String key serde (no repartition():
the join's own repartition topic); group_by + count joined with the table; a foreign-key
join of the orders' table. $KAFKA_TEST_JOINED_KEY=default leaves out Joined's key serde
(the topic's is then the default, Json), as an app without Joined would."""

import os

import lakestate as ls

ID = os.environ["KAFKA_TEST_ID"]
S = ls.Serdes.String()

b = ls.StreamsBuilder()
customers = b.table(f"customers-{ID}", ls.Consumed.with_(S, S))
orders = b.stream(f"orders-{ID}", ls.Consumed.with_(S, ls.Serdes.Json()))
produced = ls.Produced.with_(S, S)
(
    orders.select_key(lambda k, v: v["customer"])
    .repartition(ls.Repartitioned.as_("by-customer").with_key_serde(S))
    .join(customers, lambda order, name: f"{order['id']}:{name}")
    .to(f"joined-{ID}", produced)
)
joined_key = None if os.environ.get("KAFKA_TEST_JOINED_KEY") == "default" else S
(
    orders.select_key(lambda k, v: v["customer"])
    .join(
        customers, lambda order, name: f"{order['id']}:{name}", ls.Joined.with_(joined_key, None, S)
    )
    .to(f"direct-joined-{ID}", produced)
)
(
    orders.group_by(lambda k, v: v["customer"], ls.Grouped.with_("per-customer", S, None))
    .count()
    .join(customers, lambda count, name: f"{name}={count}")
    .to_stream()
    .to(f"counted-{ID}", produced)
)
(
    orders.to_table()
    .join(customers, lambda v: v["customer"], lambda order, name: f"{order['id']}:{name}")
    .to_stream()
    .to(f"fk-joined-{ID}", produced)
)
app = ls.App(f"kcopart-{ID}", b.build(), {"bootstrap.servers": os.environ["KAFKA_TEST_BOOTSTRAP"]})
