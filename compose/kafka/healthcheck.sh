#!/usr/bin/env bash
# Healthy once the broker answers an ApiVersions request on its client listener.
exec java -Xmx64m -cp "/opt/kafka/libs/*" -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties \
    org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server localhost:9092 >/dev/null 2>&1
