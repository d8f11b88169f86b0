// The compatibility oracle: MirrorMaker 2's own Java classes answering strait's test suite.
//
// It lives in MM2's package because the record classes keep their byte encoders
// (recordKey/recordValue) and MirrorSourceConnector its replication decision package-private;
// on the class path a second jar or folder may add classes to a package.
//
// Protocol: one request per stdin line, one response per stdout line, "OK <tokens>" or
// "ERR <message>". Tokens are separated by single spaces. Strings and byte arrays travel as
// "x" + lowercase hex of their bytes (UTF-8 for strings), so any value fits one token; "-" is null.
package org.apache.kafka.connect.mirror;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.regex.Pattern;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class Mm2Oracle {

    private static final HexFormat HEX = HexFormat.of();

    private Mm2Oracle() {
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            String response;
            try {
                response = "OK" + join(handle(line.split(" ", -1)));
            } catch (Throwable e) {
                response = "ERR " + e.getClass().getSimpleName() + ": " + String.valueOf(e.getMessage()).replace('\n', ' ');
            }
            out.println(response);
        }
    }

    private static List<String> handle(String[] a) throws Exception {
        switch (a[0]) {
            case "enc-heartbeat": {
                Heartbeat h = new Heartbeat(str(a[1]), str(a[2]), Long.parseLong(a[3]));
                return List.of(bytes(h.recordKey()), bytes(h.recordValue()));
            }
            case "enc-checkpoint": {
                Checkpoint c = new Checkpoint(str(a[1]), new TopicPartition(str(a[2]), Integer.parseInt(a[3])),
                        Long.parseLong(a[4]), Long.parseLong(a[5]), str(a[6]));
                return List.of(bytes(c.recordKey()), bytes(c.recordValue()));
            }
            case "enc-offsetsync": {
                OffsetSync s = new OffsetSync(new TopicPartition(str(a[1]), Integer.parseInt(a[2])),
                        Long.parseLong(a[3]), Long.parseLong(a[4]));
                return List.of(bytes(s.recordKey()), bytes(s.recordValue()));
            }
            case "dec-heartbeat": {
                Heartbeat h = Heartbeat.deserializeRecord(record(a[1], a[2]));
                return List.of(enc(h.sourceClusterAlias()), enc(h.targetClusterAlias()), Long.toString(h.timestamp()));
            }
            case "dec-checkpoint": {
                Checkpoint c = Checkpoint.deserializeRecord(record(a[1], a[2]));
                return List.of(enc(c.consumerGroupId()), enc(c.topicPartition().topic()),
                        Integer.toString(c.topicPartition().partition()), Long.toString(c.upstreamOffset()),
                        Long.toString(c.downstreamOffset()), enc(c.metadata()));
            }
            case "dec-offsetsync": {
                OffsetSync s = OffsetSync.deserializeRecord(record(a[1], a[2]));
                return List.of(enc(s.topicPartition().topic()), Integer.toString(s.topicPartition().partition()),
                        Long.toString(s.upstreamOffset()), Long.toString(s.downstreamOffset()));
            }
            case "policy":
                return policy(a);
            case "topic-filter": {
                DefaultTopicFilter f = new DefaultTopicFilter();
                f.configure(filterConfig("topics", a[1], "topics.exclude", a[2]));
                return List.of(Boolean.toString(f.shouldReplicateTopic(str(a[3]))));
            }
            case "group-filter": {
                DefaultGroupFilter f = new DefaultGroupFilter();
                f.configure(filterConfig("groups", a[1], "groups.exclude", a[2]));
                return List.of(Boolean.toString(f.shouldReplicateGroup(str(a[3]))));
            }
            case "config-filter": {
                DefaultConfigPropertyFilter f = new DefaultConfigPropertyFilter();
                f.configure(filterConfig("config.properties.exclude", a[1], "use.defaults.from", a[2]));
                String name = str(a[3]);
                return List.of(Boolean.toString(f.shouldReplicateConfigProperty(name)),
                        Boolean.toString(f.shouldReplicateSourceDefault(name)));
            }
            case "replicate":
                return replicate(a);
            case "mm2-flow":
                return mm2Flow(a);
            case "mm2-keys":
                return mm2Keys();
            // Cluster commands start with BOOTSTRAP SEPARATOR ("-" for the default policy's ".").
            case "translate": {
                Map<TopicPartition, OffsetAndMetadata> offsets = RemoteClusterUtils.translateOffsets(
                        clientProps(a[1], a[2]), str(a[3]), str(a[4]), Duration.ofMillis(Long.parseLong(a[5])));
                return offsetTokens(null, offsets);
            }
            case "remote-offsets":
                return remoteOffsets(a);
            case "heartbeat-topics":
                return sorted(RemoteClusterUtils.heartbeatTopics(clientProps(a[1], a[2])));
            case "checkpoint-topics":
                return sorted(RemoteClusterUtils.checkpointTopics(clientProps(a[1], a[2])));
            case "upstream-clusters":
                return sorted(RemoteClusterUtils.upstreamClusters(clientProps(a[1], a[2])));
            case "replication-hops":
                return List.of(Integer.toString(
                        RemoteClusterUtils.replicationHops(clientProps(a[1], a[2]), str(a[3]))));
            case "produce-heartbeats":
                return produceHeartbeats(a);
            default:
                throw new IllegalArgumentException("unknown command " + a[0]);
        }
    }

    // policy CLASS SEP INTERNAL_ENABLED SOURCE_ALIAS ALIAS TOPIC
    private static List<String> policy(String[] a) {
        ReplicationPolicy p = newPolicy(a[1], a[2], a[3], a[4]);
        String alias = str(a[5]);
        String topic = str(a[6]);
        return List.of(enc(p.formatRemoteTopic(alias, topic)), enc(p.topicSource(topic)), enc(p.upstreamTopic(topic)),
                enc(p.originalTopic(topic)), Boolean.toString(p.isHeartbeatsTopic(topic)),
                Boolean.toString(p.isCheckpointsTopic(topic)), Boolean.toString(p.isMM2InternalTopic(topic)),
                Boolean.toString(p.isInternalTopic(topic)), enc(p.heartbeatsTopic()), enc(p.checkpointsTopic(alias)),
                enc(p.offsetSyncsTopic(alias)));
    }

    // replicate CLASS SEP INTERNAL_ENABLED SOURCE_ALIAS SOURCE TARGET HEARTBEATS_ENABLED INCLUDE EXCLUDE TOPIC
    private static List<String> replicate(String[] a) {
        ReplicationPolicy p = newPolicy(a[1], a[2], a[3], a[4]);
        DefaultTopicFilter filter = new DefaultTopicFilter();
        filter.configure(filterConfig("topics", a[8], "topics.exclude", a[9]));
        MirrorSourceConnector connector = new MirrorSourceConnector(new SourceAndTarget(str(a[5]), str(a[6])), p,
                filter, new DefaultConfigPropertyFilter(), Boolean.parseBoolean(a[7]));
        String topic = str(a[10]);
        return List.of(Boolean.toString(connector.shouldReplicateTopic(topic)),
                Boolean.toString(connector.isCycle(topic)));
    }

    // remote-offsets BOOTSTRAP SEPARATOR REMOTE_ALIAS GROUP_REGEX TIMEOUT_MS
    private static List<String> remoteOffsets(String[] a) {
        try (MirrorClient client = new MirrorClient(clientProps(a[1], a[2]))) {
            Map<String, Map<TopicPartition, OffsetAndMetadata>> byGroup = client.remoteConsumerOffsets(
                    Pattern.compile(str(a[4])), str(a[3]), Duration.ofMillis(Long.parseLong(a[5])));
            List<String> tokens = new ArrayList<>();
            for (String group : new TreeSet<>(byGroup.keySet())) {
                tokens.addAll(offsetTokens(group, byGroup.get(group)));
            }
            return tokens;
        }
    }

    // produce-heartbeats BOOTSTRAP TOPIC (SOURCE TARGET TIMESTAMP)...
    private static List<String> produceHeartbeats(String[] a) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, str(a[1]));
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        try (KafkaProducer<byte[], byte[]> producer =
                     new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            int count = 0;
            for (int i = 3; i + 2 < a.length; i += 3) {
                Heartbeat h = new Heartbeat(str(a[i]), str(a[i + 1]), Long.parseLong(a[i + 2]));
                // Partition 0 and the heartbeat's own timestamp, as MirrorHeartbeatTask sends them.
                producer.send(new ProducerRecord<>(str(a[2]), 0, h.timestamp(), h.recordKey(), h.recordValue())).get();
                count++;
            }
            return List.of(Integer.toString(count));
        }
    }

    // mm2-flow PROPERTIES SOURCE TARGET TOPIC: what MM2 4.x makes of a whole connect-mirror-maker.properties
    // text for one flow: the remote name of TOPIC and its parsed source, then the replication factors of
    // remote, offset-syncs, checkpoints and heartbeats topics, then whether offset syncs are emitted.
    private static List<String> mm2Flow(String[] a) throws java.io.IOException {
        Properties props = new Properties();
        props.load(new java.io.StringReader(str(a[1])));
        Map<String, String> originals = new HashMap<>();
        props.stringPropertyNames().forEach(name -> originals.put(name, props.getProperty(name)));
        MirrorMakerConfig config = new MirrorMakerConfig(originals);
        SourceAndTarget flow = new SourceAndTarget(str(a[2]), str(a[3]));
        MirrorSourceConfig source = new MirrorSourceConfig(config.connectorBaseConfig(flow, MirrorSourceConnector.class));
        MirrorCheckpointConfig checkpoint =
                new MirrorCheckpointConfig(config.connectorBaseConfig(flow, MirrorCheckpointConnector.class));
        MirrorHeartbeatConfig heartbeat =
                new MirrorHeartbeatConfig(config.connectorBaseConfig(flow, MirrorHeartbeatConnector.class));
        ReplicationPolicy policy = source.replicationPolicy();
        String remote = policy.formatRemoteTopic(flow.source(), str(a[4]));
        return List.of(enc(remote), enc(policy.topicSource(remote)), Integer.toString(source.replicationFactor()),
                Short.toString(source.offsetSyncsTopicReplicationFactor()),
                Short.toString(checkpoint.checkpointsTopicReplicationFactor()),
                Short.toString(heartbeat.heartbeatsTopicReplicationFactor()),
                Boolean.toString(source.emitOffsetSyncsEnabled()));
    }

    // mm2-keys: every key the three MM2 connectors' ConfigDefs define (Connect's own connector keys
    // included), each as NAME TYPE DEFAULT ("-" when there is none).
    private static List<String> mm2Keys() {
        java.util.TreeMap<String, org.apache.kafka.common.config.ConfigDef.ConfigKey> keys = new java.util.TreeMap<>();
        for (org.apache.kafka.common.config.ConfigDef def : List.of(MirrorSourceConfig.CONNECTOR_CONFIG_DEF,
                MirrorCheckpointConfig.CONNECTOR_CONFIG_DEF, MirrorHeartbeatConfig.CONNECTOR_CONFIG_DEF)) {
            keys.putAll(def.configKeys());
        }
        List<String> tokens = new ArrayList<>();
        keys.forEach((name, key) -> {
            tokens.add(enc(name));
            tokens.add(key.type.name());
            boolean none = !key.hasDefault() || key.defaultValue == null;
            tokens.add(none ? "-" : enc(org.apache.kafka.common.config.ConfigDef.convertToString(key.defaultValue, key.type)));
        });
        return tokens;
    }

    private static ReplicationPolicy newPolicy(String kind, String separator, String internalEnabled, String sourceAlias) {
        DefaultReplicationPolicy p = switch (kind) {
            case "default" -> new DefaultReplicationPolicy();
            case "identity" -> new IdentityReplicationPolicy();
            default -> throw new IllegalArgumentException("unknown policy " + kind);
        };
        Map<String, Object> config = new HashMap<>();
        config.put("replication.policy.separator", str(separator));
        config.put("replication.policy.internal.topic.separator.enabled", internalEnabled);
        if (!"-".equals(sourceAlias)) {
            config.put("source.cluster.alias", str(sourceAlias));
        }
        p.configure(config);
        return p;
    }

    private static Map<String, Object> filterConfig(String firstKey, String first, String secondKey, String second) {
        Map<String, Object> config = new HashMap<>();
        if (!"-".equals(first)) {
            config.put(firstKey, str(first));
        }
        if (!"-".equals(second)) {
            config.put(secondKey, str(second));
        }
        return config;
    }

    private static Map<String, Object> clientProps(String bootstrap, String separator) {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", str(bootstrap));
        if (!"-".equals(separator)) {
            props.put("replication.policy.separator", str(separator));
        }
        return props;
    }

    private static List<String> offsetTokens(String group, Map<TopicPartition, OffsetAndMetadata> offsets) {
        List<String> tokens = new ArrayList<>();
        offsets.forEach((tp, om) -> {
            if (group != null) {
                tokens.add(enc(group));
            }
            tokens.add(enc(tp.topic()));
            tokens.add(Integer.toString(tp.partition()));
            tokens.add(Long.toString(om.offset()));
            tokens.add(enc(om.metadata()));
        });
        return tokens;
    }

    private static List<String> sorted(java.util.Set<String> values) {
        List<String> tokens = new ArrayList<>();
        for (String value : new TreeSet<>(values)) {
            tokens.add(enc(value));
        }
        return tokens;
    }

    private static ConsumerRecord<byte[], byte[]> record(String key, String value) {
        return new ConsumerRecord<>("oracle", 0, 0L, raw(key), raw(value));
    }

    private static String join(List<String> tokens) {
        StringBuilder sb = new StringBuilder();
        for (String token : tokens) {
            sb.append(' ').append(token);
        }
        return sb.toString();
    }

    private static String enc(String value) {
        return value == null ? "-" : "x" + HEX.formatHex(value.getBytes(StandardCharsets.UTF_8));
    }

    private static String str(String token) {
        byte[] b = raw(token);
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    private static String bytes(byte[] value) {
        return value == null ? "-" : "x" + HEX.formatHex(value);
    }

    private static byte[] raw(String token) {
        if ("-".equals(token)) {
            return null;
        }
        if (!token.startsWith("x")) {
            throw new IllegalArgumentException("not an x-hex token: " + token);
        }
        return HEX.parseHex(token.substring(1));
    }
}
