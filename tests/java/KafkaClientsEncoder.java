// Writes Kafka protocol message bodies with Kafka's own Java code (kafka-clients), as an encoder that
// shares nothing with kwsniff: tests/test_protocol_oracle_java.py compiles and runs it and decodes
// every body with kwsniff.
//
// For every API the jar knows (ApiMessageType), every version its generated schemas define and both
// directions, it draws values for each field of that version's Schema from a seeded Random, reads them
// into the generated message class with its JsonConverter, and writes the body with the generated
// code (MessageUtil.toByteBuffer), which is what Kafka's clients and brokers send. (Schema.write is
// not used: it writes nullable structs without their presence byte.) Tagged fields are left out.
// Output: one line per (api, version, direction): "key version direction hex-body json-values", the
// values keyed by the schema's snake_case field names (bytes as {"hex": ...}, uuids as text).
//
// Usage: java -cp kafka-clients.jar:. KafkaClientsEncoder SEED [api_key ...]

import java.nio.ByteBuffer;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.lang.reflect.ParameterizedType;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.message.ApiMessageType;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.common.protocol.types.BoundField;
import org.apache.kafka.common.protocol.types.Schema;
import org.apache.kafka.common.protocol.types.Type;

public final class KafkaClientsEncoder {
    private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
    private final Random random;

    private KafkaClientsEncoder(long seed) {
        this.random = new Random(seed);
    }

    public static void main(String[] args) throws ReflectiveOperationException {
        KafkaClientsEncoder encoder = new KafkaClientsEncoder(Long.parseLong(args[0]));
        Set<Integer> only = new HashSet<>();
        for (int i = 1; i < args.length; i++) {
            only.add(Integer.parseInt(args[i]));
        }
        StringBuilder out = new StringBuilder();
        for (ApiMessageType api : ApiMessageType.values()) {
            if (!only.isEmpty() && !only.contains((int) api.apiKey())) {
                continue;
            }
            encoder.emit(out, api, "request", api.requestSchemas(), api.newRequest());
            encoder.emit(out, api, "response", api.responseSchemas(), api.newResponse());
        }
        System.out.print(out);
    }

    private void emit(StringBuilder out, ApiMessageType api, String direction, Schema[] schemas, ApiMessage empty)
            throws ReflectiveOperationException {
        Class<?> converter = Class.forName(empty.getClass().getName() + "JsonConverter");
        for (int version = 0; version < schemas.length; version++) {
            Schema schema = schemas[version];
            if (schema == null) {
                continue;
            }
            StringBuilder json = new StringBuilder();
            JsonNode node = fill(schema, json, empty.getClass());
            ApiMessage message = (ApiMessage) converter.getMethod("read", JsonNode.class, short.class)
                .invoke(null, node, (short) version);
            ByteBuffer buffer = MessageUtil.toByteBuffer(message, (short) version);
            byte[] body = new byte[buffer.remaining()];
            buffer.get(body);
            out.append(api.apiKey()).append(' ').append(version).append(' ').append(direction).append(' ')
                .append(hex(body)).append(' ').append(json).append('\n');
        }
    }

    // The schema's snake_case names lose the spec's capitals ("KRaft"); the generated class's fields
    // keep them, and the JSON converters read those names.
    private static Map<String, Field> javaFields(Class<?> data) {
        Map<String, Field> out = new HashMap<>();
        for (Field f : data.getDeclaredFields()) {
            if (!Modifier.isStatic(f.getModifiers())) {
                out.put(f.getName().toLowerCase(Locale.ROOT), f);
            }
        }
        return out;
    }

    // The generated class of a struct field's values: the field's own type, the element of a List,
    // or the element of an ImplicitLinkedHashMultiCollection subclass.
    private static Class<?> elementClass(Field f) {
        java.lang.reflect.Type t = f.getGenericType();
        if (t instanceof ParameterizedType) {
            return (Class<?>) ((ParameterizedType) t).getActualTypeArguments()[0];
        }
        Class<?> c = f.getType();
        if (c.getGenericSuperclass() instanceof ParameterizedType) {
            return (Class<?>) ((ParameterizedType) c.getGenericSuperclass()).getActualTypeArguments()[0];
        }
        return c;
    }

    private ObjectNode fill(Schema schema, StringBuilder json, Class<?> data) {
        Map<String, Field> fields = javaFields(data);
        ObjectNode node = NODES.objectNode();
        json.append('{');
        boolean first = true;
        for (BoundField field : schema.fields()) {
            if (field.def.name.equals("_tagged_fields")) {
                continue;
            }
            if (!first) {
                json.append(',');
            }
            first = false;
            json.append('"').append(field.def.name).append("\":");
            Field java = fields.get(field.def.name.replace("_", ""));
            if (java == null) {
                throw new IllegalStateException(data.getName() + " has no field " + field.def.name);
            }
            node.set(java.getName(), value(field.def.type, json, elementClass(java)));
        }
        json.append('}');
        return node;
    }

    private JsonNode value(Type type, StringBuilder json, Class<?> data) {
        // Records types call themselves nullable whatever the field says; they are written empty.
        if (type.isNullable() && !type.toString().endsWith("RECORDS") && random.nextInt(5) == 0) {
            json.append("null");
            return NODES.nullNode();
        }
        if (type instanceof Schema) {
            return fill((Schema) type, json, data);
        }
        if (type.isArray()) {
            Type element = type.arrayElementType().get();
            int n = random.nextInt(3);
            ArrayNode items = NODES.arrayNode();
            json.append('[');
            for (int i = 0; i < n; i++) {
                if (i > 0) {
                    json.append(',');
                }
                items.add(value(element, json, data));
            }
            json.append(']');
            return items;
        }
        String name = type.toString();
        switch (name) {
            case "BOOLEAN": {
                boolean v = random.nextBoolean();
                json.append(v);
                return NODES.booleanNode(v);
            }
            case "INT8": {
                byte v = (byte) random.nextInt();
                json.append(v);
                return NODES.numberNode(v);
            }
            case "INT16": {
                short v = (short) random.nextInt();
                json.append(v);
                return NODES.numberNode(v);
            }
            case "UINT16": {
                int v = random.nextInt(65536);
                json.append(v);
                return NODES.numberNode(v);
            }
            case "INT32": {
                int v = random.nextInt();
                json.append(v);
                return NODES.numberNode(v);
            }
            case "UNSIGNED_INT32": {
                long v = random.nextInt() & 0xFFFFFFFFL;
                json.append(v);
                return NODES.numberNode(v);
            }
            case "INT64": {
                long v = random.nextLong();
                json.append(v);
                return NODES.numberNode(v);
            }
            case "FLOAT64": {
                double v = random.nextInt(1000) / 8.0;
                json.append(v);
                return NODES.numberNode(v);
            }
            case "UUID": {
                Uuid v = new Uuid(random.nextLong(), random.nextLong());
                json.append('"').append(new java.util.UUID(v.getMostSignificantBits(), v.getLeastSignificantBits())).append('"');
                return NODES.textNode(v.toString());
            }
            case "STRING":
            case "NULLABLE_STRING":
            case "COMPACT_STRING":
            case "COMPACT_NULLABLE_STRING": {
                StringBuilder s = new StringBuilder();
                int n = random.nextInt(8);
                for (int i = 0; i < n; i++) {
                    s.append((char) ('a' + random.nextInt(26)));
                }
                json.append('"').append(s).append('"');
                return NODES.textNode(s.toString());
            }
            case "BYTES":
            case "NULLABLE_BYTES":
            case "COMPACT_BYTES":
            case "COMPACT_NULLABLE_BYTES": {
                byte[] b = new byte[random.nextInt(6)];
                random.nextBytes(b);
                json.append("{\"hex\":\"").append(hex(b)).append("\"}");
                return NODES.binaryNode(b);
            }
            case "RECORDS":
            case "COMPACT_RECORDS": {
                json.append("{\"hex\":\"\"}");
                return NODES.binaryNode(new byte[0]);
            }
            default:
                throw new IllegalArgumentException("type " + name);
        }
    }

    private static String hex(byte[] bytes) {
        StringBuilder s = new StringBuilder();
        for (byte b : bytes) {
            s.append(String.format("%02x", b));
        }
        return s.toString();
    }
}
