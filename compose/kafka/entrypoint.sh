#!/usr/bin/env bash
# Runs one KRaft node of the compose lab. Its settings come from KAFKA_* variables, named as the
# official apache/kafka image names them: KAFKA_FOO_BAR is foo.bar in server.properties.
# CLUSTER_ID formats the node's storage on first start; the data stays in /var/lib/kafka/data.
set -euo pipefail
: "${CLUSTER_ID:?set CLUSTER_ID (a base64 UUID) for this Kafka node}"
config=/var/lib/kafka/server.properties
data=/var/lib/kafka/data
classpath="/opt/kafka/libs/*"
{
    echo "log.dirs=$data"
    while IFS='=' read -r name value; do
        case "$name" in
            KAFKA_OPTS | KAFKA_HEAP_OPTS) ;;
            KAFKA_*) key="${name#KAFKA_}"; key="${key,,}"; echo "${key//_/.}=$value" ;;
        esac
    done < <(env)
} > "$config"
if [[ ! -f "$data/meta.properties" ]]; then
    java -Xmx128m -cp "$classpath" kafka.tools.StorageTool format -t "$CLUSTER_ID" -c "$config"
fi
# KAFKA_OPTS carries the JMX exporter agent; word splitting of the two option lists is wanted.
# shellcheck disable=SC2086
exec java ${KAFKA_HEAP_OPTS:--Xmx512m} ${KAFKA_OPTS:-} -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties -cp "$classpath" kafka.Kafka "$config"
