/* strait's copy loop in C: source partitions to the target through librdkafka, no Python per record.
 *
 * One NativeCopy owns a consumer of the source (partitions assigned, never a group member) and an
 * idempotent producer to the target. copy() consumes a batch and produces each record to its remote
 * partition with key, value, headers and timestamp unchanged, without the GIL. Each sent record keeps
 * a slot (source offset, timestamp) in its partition's ring; the delivery report fills in the target
 * offset and the acknowledgement time. take() hands Python the leading run of acknowledged slots as
 * arrays, so offset syncs, latencies and progress stay in Python and cost per batch, not per record.
 *
 * The librdkafka it calls is confluent-kafka's own (strait_replicator.native loads it first, global):
 * one library, one version, for the Python clients and this loop.
 *
 * Two locks: `client` is held by the calls that use the clients (assign, copy, poll, flush, close: the
 * copier's thread), for as long as they wait on a broker; `ring` guards the partitions' rings,
 * counters and failures for moments only, so state() from the task's thread never waits on a broker.
 * Lock order: client, then ring. Neither is ever waited for while holding the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

_Static_assert(sizeof(uintptr_t) == 8, "a delivery's tag packs a partition index and a sequence number in 64 bits");

#define PART_BITS 20
#define SEQ_BITS (64 - PART_BITS)
#define SEQ_MASK ((UINT64_C(1) << SEQ_BITS) - 1)
#define MAX_PARTS (1 << PART_BITS)
#define LOG_LINES 256
#define UNKNOWN_PARTITION_WAIT_MS 60000
#define IDLE_SLICE_MS 10
/* the tag of a record that is not a copy: a partition index no copy has */
#define OTHER_RECORD (((uint64_t)(MAX_PARTS - 1)) << SEQ_BITS)

typedef struct {
    int64_t offset;     /* source offset */
    int64_t timestamp;  /* source timestamp, ms */
    int64_t target;     /* target offset once acknowledged */
    double ack_time;    /* wall clock of the acknowledgement, s */
    char acked;
} Slot;

typedef struct {
    char *topic;
    int32_t partition;
    int32_t target_partition; /* RD_KAFKA_PARTITION_UA: the producer's partitioner places each record */
    rd_kafka_topic_t *rkt;    /* the remote topic, on the producer */
    rd_kafka_topic_t *source; /* the topic, on the consumer: its metadata is looked up before assign() */
    Slot *slots;              /* ring of records sent and not yet taken: slots[(head + i) % cap], i < len */
    size_t cap, head, len;
    uint64_t base_seq;        /* sequence number of the ring's head */
    int64_t bytes, reached, last_sent;
    int gone;
    int moved;                /* sent, acknowledged, failed or reached further since changed() last looked */
} Part;

typedef struct {
    Py_ssize_t part;
    int code;
    int fatal;
    char text[256];
} Failure;

typedef struct {
    Failure *items;
    size_t len, cap;
} Failures;

typedef struct {
    int level;
    char facility[32];
    char text[480];
} LogLine;

typedef struct {
    PyObject_HEAD
    rd_kafka_t *consumer, *producer;
    rd_kafka_queue_t *queue;
    Part *parts;
    Py_ssize_t nparts, active;
    /* partition lookup by (consumer topic handle, partition) */
    const rd_kafka_topic_t **lookup_rkt;
    int32_t *lookup_partition;
    Py_ssize_t *lookup_index;
    size_t lookup_cap;
    /* messages consumed and not yet sent (the lease ended mid-batch, or a send failed) */
    rd_kafka_message_t **held;
    size_t held_from, held_len, held_cap;
    Failures delivery_failures, read_failures;
    pthread_mutex_t client;
    pthread_mutex_t ring;
    pthread_mutex_t log_lock;
    LogLine logs[LOG_LINES];
    size_t nlogs, logs_dropped;
    int closed, assigned;
} NativeCopy;

static double wall_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Ring lock held. */
static void add_failure(Failures *failures, Py_ssize_t part, int code, int fatal, const char *text) {
    if (failures->len == failures->cap) {
        size_t cap = failures->cap ? failures->cap * 2 : 16;
        Failure *items = realloc(failures->items, cap * sizeof(Failure));
        if (items == NULL)
            return; /* out of memory: the failure is still seen by the caller's other checks */
        failures->items = items;
        failures->cap = cap;
    }
    Failure *failure = &failures->items[failures->len++];
    failure->part = part;
    failure->code = code;
    failure->fatal = fatal;
    snprintf(failure->text, sizeof(failure->text), "%s", text ? text : "");
}

static void on_log(const rd_kafka_t *rk, int level, const char *facility, const char *text) {
    NativeCopy *self = rd_kafka_opaque(rk);
    if (self == NULL)
        return;
    pthread_mutex_lock(&self->log_lock);
    if (self->nlogs < LOG_LINES) {
        LogLine *line = &self->logs[self->nlogs++];
        line->level = level;
        snprintf(line->facility, sizeof(line->facility), "%s", facility);
        snprintf(line->text, sizeof(line->text), "%s", text);
    } else {
        self->logs_dropped++;
    }
    pthread_mutex_unlock(&self->log_lock);
}

static Slot *slot_at(Part *part, size_t i) {
    return &part->slots[(part->head + i) % part->cap];
}

static int ring_grow(Part *part) {
    size_t cap = part->cap ? part->cap * 2 : 1024;
    Slot *slots = malloc(cap * sizeof(Slot));
    if (slots == NULL)
        return -1;
    for (size_t i = 0; i < part->len; i++)
        slots[i] = *slot_at(part, i);
    free(part->slots);
    part->slots = slots;
    part->cap = cap;
    part->head = 0;
    return 0;
}

/* Served on the copier's thread, inside rd_kafka_poll/flush (client lock held). A failed record stays
 * unacknowledged in its ring, so take() never passes it. */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *message, void *opaque) {
    NativeCopy *self = opaque;
    uint64_t tag = (uint64_t)(uintptr_t)message->_private;
    Py_ssize_t index = (Py_ssize_t)(tag >> SEQ_BITS);
    uint64_t seq = tag & SEQ_MASK;
    double now = wall_clock();
    (void)rk;
    if (index >= self->nparts)
        return;
    Part *part = &self->parts[index];
    pthread_mutex_lock(&self->ring);
    part->moved = 1;
    if (message->err) {
        add_failure(&self->delivery_failures, index, message->err, 0, rd_kafka_err2str(message->err));
    } else if (seq >= part->base_seq && seq - part->base_seq < part->len) {
        Slot *slot = slot_at(part, (size_t)(seq - part->base_seq));
        slot->acked = 1;
        slot->target = message->offset;
        slot->ack_time = now;
    }
    pthread_mutex_unlock(&self->ring);
}

static Py_ssize_t find_part(NativeCopy *self, const rd_kafka_message_t *message) {
    if (message->rkt == NULL)
        return -1;
    size_t mask = self->lookup_cap - 1;
    size_t h = (((uintptr_t)message->rkt >> 4) * 31u + (uint32_t)message->partition * 2654435761u) & mask;
    for (size_t probe = 0; probe < self->lookup_cap; probe++, h = (h + 1) & mask) {
        if (self->lookup_rkt[h] == NULL)
            break;
        if (self->lookup_rkt[h] == message->rkt && self->lookup_partition[h] == message->partition)
            return self->lookup_index[h];
    }
    const char *name = rd_kafka_topic_name(message->rkt);
    for (Py_ssize_t i = 0; i < self->nparts; i++) {
        if (self->parts[i].partition == message->partition && strcmp(self->parts[i].topic, name) == 0) {
            self->lookup_rkt[h] = message->rkt;
            self->lookup_partition[h] = message->partition;
            self->lookup_index[h] = i;
            return i;
        }
    }
    return -1;
}

typedef enum { SENT, LEASE_ENDED, REFUSED } Sent;

/* Produce one record unless the lease (write_until, wall clock) ends first, also while it waits for
 * room in the producer's queue or for a grown remote topic's metadata; REFUSED with *err when
 * librdkafka did not take it. Client lock held. */
static Sent send_record(NativeCopy *self, Py_ssize_t index, const rd_kafka_message_t *message, double write_until,
                        rd_kafka_resp_err_t *err) {
    Part *part = &self->parts[index];
    pthread_mutex_lock(&self->ring);
    int room = part->len < part->cap || ring_grow(part) == 0;
    uint64_t seq = part->base_seq + part->len; /* only this thread adds slots or takes them */
    pthread_mutex_unlock(&self->ring);
    if (!room) {
        *err = RD_KAFKA_RESP_ERR__FAIL; /* no memory for the slot: the copy stops */
        return REFUSED;
    }
    void *tag = (void *)(uintptr_t)(((uint64_t)index << SEQ_BITS) | (seq & SEQ_MASK));
    int64_t timestamp = rd_kafka_message_timestamp(message, NULL);
    rd_kafka_headers_t *headers = NULL;
    const rd_kafka_headers_t *given = NULL;
    if (rd_kafka_message_headers(message, (rd_kafka_headers_t **)&given) == RD_KAFKA_RESP_ERR_NO_ERROR && given)
        headers = rd_kafka_headers_copy(given);
    double deadline = 0.0;
    for (;;) {
        if (headers != NULL)
            *err = rd_kafka_producev(self->producer, RD_KAFKA_V_RKT(part->rkt),
                                     RD_KAFKA_V_PARTITION(part->target_partition),
                                     RD_KAFKA_V_VALUE(message->payload, message->len),
                                     RD_KAFKA_V_KEY(message->key, message->key_len),
                                     RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                     RD_KAFKA_V_TIMESTAMP(timestamp > 0 ? timestamp : 0),
                                     RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_OPAQUE(tag), RD_KAFKA_V_END);
        else
            *err = rd_kafka_producev(self->producer, RD_KAFKA_V_RKT(part->rkt),
                                     RD_KAFKA_V_PARTITION(part->target_partition),
                                     RD_KAFKA_V_VALUE(message->payload, message->len),
                                     RD_KAFKA_V_KEY(message->key, message->key_len),
                                     RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                     RD_KAFKA_V_TIMESTAMP(timestamp > 0 ? timestamp : 0),
                                     RD_KAFKA_V_OPAQUE(tag), RD_KAFKA_V_END);
        if (*err == RD_KAFKA_RESP_ERR_NO_ERROR)
            break;
        double now = wall_clock();
        if (*err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION && deadline == 0.0)
            deadline = now + UNKNOWN_PARTITION_WAIT_MS / 1000.0;
        int waits = *err == RD_KAFKA_RESP_ERR__QUEUE_FULL
                    || (*err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION && now < deadline);
        if (!waits || now > write_until) {
            if (headers != NULL)
                rd_kafka_headers_destroy(headers);
            return waits ? LEASE_ENDED : REFUSED;
        }
        if (*err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION) {
            /* a remote topic just grown (new source partition): the producer's metadata lags behind */
            const struct rd_kafka_metadata *metadata = NULL;
            if (rd_kafka_metadata(self->producer, 0, part->rkt, &metadata, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR)
                rd_kafka_metadata_destroy(metadata);
        }
        rd_kafka_poll(self->producer, 50); /* lets deliveries drain from a full queue */
    }
    pthread_mutex_lock(&self->ring);
    Slot *slot = slot_at(part, part->len++);
    slot->offset = message->offset;
    slot->timestamp = timestamp;
    slot->target = -1;
    slot->ack_time = 0.0;
    slot->acked = 0;
    part->bytes += (int64_t)message->len + (int64_t)message->key_len;
    part->last_sent = message->offset;
    part->moved = 1;
    pthread_mutex_unlock(&self->ring);
    return SENT;
}

static void hold(NativeCopy *self, rd_kafka_message_t **messages, size_t count) {
    if (count == 0)
        return;
    if (self->held_cap < count) {
        rd_kafka_message_t **held = realloc(self->held, count * sizeof(*held));
        if (held == NULL) { /* cannot keep them: the copy must stop, the next copier reads them again */
            for (size_t i = 0; i < count; i++)
                rd_kafka_message_destroy(messages[i]);
            pthread_mutex_lock(&self->ring);
            add_failure(&self->delivery_failures, 0, RD_KAFKA_RESP_ERR__FAIL, 1, "out of memory holding records");
            pthread_mutex_unlock(&self->ring);
            return;
        }
        self->held = held;
        self->held_cap = count;
    }
    memmove(self->held, messages, count * sizeof(*messages));
    self->held_from = 0;
    self->held_len = count;
}

static int is_gone_error(rd_kafka_resp_err_t err) {
    return err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC
           || err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION;
}

/* Send messages[0..count) in order until write_until passes or a send is refused; the unsent rest is
 * held. Returns how many were sent; consumed messages are destroyed once handled. Client lock held. */
static size_t send_batch(NativeCopy *self, rd_kafka_message_t **messages, size_t count, double write_until,
                         rd_kafka_resp_err_t *failed, Py_ssize_t *failed_part) {
    size_t sent = 0, i;
    for (i = 0; i < count; i++) {
        rd_kafka_message_t *message = messages[i];
        if (wall_clock() > write_until)
            break;
        Py_ssize_t index = find_part(self, message);
        if (index < 0) {
            rd_kafka_message_destroy(message); /* not of a partition it copies */
            continue;
        }
        Part *part = &self->parts[index];
        pthread_mutex_lock(&self->ring);
        int skip = part->gone || message->err;
        if (message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (message->offset > part->reached) {
                part->reached = message->offset;
                part->moved = 1;
            }
        } else if (message->err && !part->gone) {
            int fatal = message->err == RD_KAFKA_RESP_ERR__FATAL;
            rd_kafka_resp_err_t code = message->err;
            char text[256] = "";
            if (fatal)
                code = rd_kafka_fatal_error(self->consumer, text, sizeof(text));
            else
                snprintf(text, sizeof(text), "%s", rd_kafka_message_errstr(message));
            if (is_gone_error(code)) { /* its topic was deleted: no more of it, Python says so */
                part->gone = 1;
                self->active--;
            }
            add_failure(&self->read_failures, index, code, fatal, text);
            part->moved = 1;
        }
        pthread_mutex_unlock(&self->ring);
        if (skip) {
            rd_kafka_message_destroy(message);
            continue;
        }
        rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
        Sent result = send_record(self, index, message, write_until, &err);
        if (result == LEASE_ENDED)
            break;
        if (result == REFUSED) {
            *failed = err;
            *failed_part = index;
            break;
        }
        rd_kafka_message_destroy(message);
        sent++;
    }
    hold(self, messages + i, count - i);
    return sent;
}

/* A str of C text that may have been cut inside a UTF-8 character. */
static PyObject *text_of(const char *text) {
    return PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
}

static PyObject *failure_list(Failures *failures) {
    PyObject *list = PyList_New((Py_ssize_t)failures->len);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < failures->len; i++) {
        Failure *f = &failures->items[i];
        PyObject *item = Py_BuildValue("(niiN)", f->part, f->code, f->fatal, text_of(f->text));
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    failures->len = 0;
    return list;
}

/* Take the ring lock from Python: without the GIL while it waits. */
static void lock_ring(NativeCopy *self) {
    if (pthread_mutex_trylock(&self->ring) == 0)
        return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->ring);
    Py_END_ALLOW_THREADS
}

static int check_open(NativeCopy *self) {
    if (self->closed) {
        PyErr_SetString(PyExc_ValueError, "the native copy is closed");
        return -1;
    }
    return 0;
}

/* The partition index a method was called with; -1 with an exception set when there is none such. */
static int part_index(NativeCopy *self, PyObject *args, Py_ssize_t *index) {
    if (!PyArg_ParseTuple(args, "n", index))
        return -1;
    if (*index < 0 || *index >= self->nparts) {
        PyErr_Format(PyExc_IndexError, "no partition %zd in this copy", *index);
        return -1;
    }
    return 0;
}

static int configure(rd_kafka_conf_t *conf, PyObject *settings, const char *role) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    char errstr[512];
    if (!PyDict_Check(settings)) {
        PyErr_Format(PyExc_TypeError, "%s settings must be a dict", role);
        return -1;
    }
    while (PyDict_Next(settings, &pos, &key, &value)) {
        const char *name = PyUnicode_AsUTF8(key);
        if (name == NULL)
            return -1;
        PyObject *text = PyObject_Str(value);
        if (text == NULL)
            return -1;
        const char *setting = PyUnicode_AsUTF8(text);
        if (setting == NULL || rd_kafka_conf_set(conf, name, setting, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
            if (setting != NULL)
                PyErr_Format(PyExc_ValueError, "%s setting %s: %s", role, name, errstr);
            Py_DECREF(text);
            return -1;
        }
        Py_DECREF(text);
    }
    return 0;
}

static rd_kafka_t *client(NativeCopy *self, PyObject *settings, rd_kafka_type_t type, const char *role) {
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (configure(conf, settings, role) != 0) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_opaque(conf, self);
    rd_kafka_conf_set_log_cb(conf, on_log);
    if (type == RD_KAFKA_PRODUCER)
        rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(type, conf, errstr, sizeof(errstr)); /* takes conf on success */
    if (rk == NULL) {
        rd_kafka_conf_destroy(conf);
        PyErr_Format(PyExc_ValueError, "%s: %s", role, errstr);
    }
    return rk;
}

static void release_all(NativeCopy *self) {
    for (size_t i = 0; i < self->held_len; i++)
        rd_kafka_message_destroy(self->held[self->held_from + i]);
    self->held_len = 0;
    if (self->queue) {
        rd_kafka_queue_destroy(self->queue);
        self->queue = NULL;
    }
    for (Py_ssize_t i = 0; i < self->nparts; i++) {
        if (self->parts[i].source) {
            rd_kafka_topic_destroy(self->parts[i].source);
            self->parts[i].source = NULL;
        }
    }
    if (self->consumer) {
        rd_kafka_consumer_close(self->consumer);
        rd_kafka_destroy(self->consumer);
        self->consumer = NULL;
    }
    for (Py_ssize_t i = 0; i < self->nparts; i++) {
        if (self->parts[i].rkt) {
            rd_kafka_topic_destroy(self->parts[i].rkt);
            self->parts[i].rkt = NULL;
        }
    }
    if (self->producer) {
        rd_kafka_destroy(self->producer);
        self->producer = NULL;
    }
}

static void NativeCopy_dealloc(NativeCopy *self) {
    if (!self->closed) {
        Py_BEGIN_ALLOW_THREADS
        release_all(self);
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t i = 0; i < self->nparts; i++) {
        free(self->parts[i].topic);
        free(self->parts[i].slots);
    }
    free(self->parts);
    free(self->lookup_rkt);
    free(self->lookup_partition);
    free(self->lookup_index);
    free(self->held);
    free(self->delivery_failures.items);
    free(self->read_failures.items);
    pthread_mutex_destroy(&self->client);
    pthread_mutex_destroy(&self->ring);
    pthread_mutex_destroy(&self->log_lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *NativeCopy_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    (void)args;
    (void)kwds;
    NativeCopy *self = (NativeCopy *)type->tp_alloc(type, 0);
    if (self != NULL) {
        pthread_mutex_init(&self->client, NULL);
        pthread_mutex_init(&self->ring, NULL);
        pthread_mutex_init(&self->log_lock, NULL);
        self->closed = 1; /* until __init__ made the clients */
    }
    return (PyObject *)self;
}

/* NativeCopy(consumer_settings, producer_settings, parts): parts is a list of
 * (topic, partition, remote_topic, target_partition); target_partition -1 leaves the partition to the
 * producer's partitioner. Both clients start connecting at once; nothing is fetched before assign(). */
static int NativeCopy_init(NativeCopy *self, PyObject *args, PyObject *kwds) {
    PyObject *consumer_settings, *producer_settings, *parts;
    static char *kwlist[] = {"consumer_settings", "producer_settings", "parts", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!", kwlist, &consumer_settings, &producer_settings,
                                     &PyList_Type, &parts))
        return -1;
    if (self->parts != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a NativeCopy is initialised once");
        return -1;
    }
    Py_ssize_t count = PyList_GET_SIZE(parts);
    if (count == 0 || count >= MAX_PARTS) {
        PyErr_Format(PyExc_ValueError, "a native copy takes 1 to %d partitions, not %zd", MAX_PARTS - 1, count);
        return -1;
    }
    self->parts = calloc((size_t)count, sizeof(Part));
    self->lookup_cap = 1;
    while (self->lookup_cap < (size_t)count * 2)
        self->lookup_cap <<= 1;
    self->lookup_rkt = calloc(self->lookup_cap, sizeof(*self->lookup_rkt));
    self->lookup_partition = calloc(self->lookup_cap, sizeof(int32_t));
    self->lookup_index = calloc(self->lookup_cap, sizeof(Py_ssize_t));
    if (!self->parts || !self->lookup_rkt || !self->lookup_partition || !self->lookup_index) {
        PyErr_NoMemory();
        return -1;
    }
    self->nparts = self->active = count;
    const char **remotes = calloc((size_t)count, sizeof(char *));
    int failed = remotes == NULL;
    if (failed)
        PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < count && !failed; i++) {
        const char *topic, *remote;
        int partition, target;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(parts, i), "sisi", &topic, &partition, &remote, &target)) {
            failed = 1;
            break;
        }
        Part *part = &self->parts[i];
        part->topic = strdup(topic);
        if (part->topic == NULL) {
            PyErr_NoMemory();
            failed = 1;
            break;
        }
        part->partition = partition;
        part->target_partition = target < 0 ? RD_KAFKA_PARTITION_UA : target;
        part->reached = part->last_sent = -1;
        remotes[i] = remote;
    }
    if (!failed) {
        self->consumer = client(self, consumer_settings, RD_KAFKA_CONSUMER, "source consumer");
        failed = self->consumer == NULL;
    }
    if (!failed) {
        self->producer = client(self, producer_settings, RD_KAFKA_PRODUCER, "target producer");
        failed = self->producer == NULL;
    }
    for (Py_ssize_t i = 0; i < count && !failed; i++) {
        self->parts[i].rkt = rd_kafka_topic_new(self->producer, remotes[i], NULL);
        self->parts[i].source = rd_kafka_topic_new(self->consumer, self->parts[i].topic, NULL);
        if (self->parts[i].rkt == NULL || self->parts[i].source == NULL) {
            PyErr_Format(PyExc_ValueError, "%s topic %s: %s", self->parts[i].rkt == NULL ? "remote" : "source",
                         self->parts[i].rkt == NULL ? remotes[i] : self->parts[i].topic,
                         rd_kafka_err2str(rd_kafka_last_error()));
            failed = 1;
        }
    }
    if (!failed) {
        rd_kafka_poll_set_consumer(self->consumer);
        self->queue = rd_kafka_queue_get_consumer(self->consumer);
    }
    free(remotes);
    if (failed) {
        Py_BEGIN_ALLOW_THREADS
        release_all(self);
        Py_END_ALLOW_THREADS
        return -1;
    }
    self->closed = 0;
    return 0;
}

/* copy(max_records, wait, write_until) -> (sent, fetched)
 * Sends what an earlier call held back, then consumes up to max_records (waiting up to `wait` s for
 * the first when none is queued, serving the target's acknowledgements meanwhile) and produces them,
 * sending nothing once the wall clock passes write_until. Failures wait for failures(). */
static PyObject *NativeCopy_copy(NativeCopy *self, PyObject *args) {
    Py_ssize_t max_records;
    double wait, write_until;
    if (!PyArg_ParseTuple(args, "ndd", &max_records, &wait, &write_until) || check_open(self) != 0)
        return NULL;
    if (max_records < 1)
        max_records = 1;
    size_t sent = 0, fetched = 0;
    rd_kafka_resp_err_t failed = RD_KAFKA_RESP_ERR_NO_ERROR;
    Py_ssize_t failed_part = -1;
    rd_kafka_message_t **batch = malloc((size_t)max_records * sizeof(*batch));
    if (batch == NULL)
        return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->client);
    if (self->held_len) {
        size_t count = self->held_len;
        rd_kafka_message_t **again = malloc(count * sizeof(*again));
        if (again != NULL) {
            memcpy(again, self->held + self->held_from, count * sizeof(*again));
            self->held_len = 0;
            sent += send_batch(self, again, count, write_until, &failed, &failed_part);
            free(again);
        }
    }
    if (self->held_len == 0 && failed == RD_KAFKA_RESP_ERR_NO_ERROR) {
        ssize_t got = rd_kafka_consume_batch_queue(self->queue, 0, batch, (size_t)max_records);
        double until = wall_clock() + wait;
        while (got == 0) {
            rd_kafka_poll(self->producer, 0); /* acknowledgements are timed when served: serve them while idle */
            if (wall_clock() >= until)
                break;
            got = rd_kafka_consume_batch_queue(self->queue, IDLE_SLICE_MS, batch, 1);
        }
        fetched = got > 0 ? (size_t)got : 0;
        sent += send_batch(self, batch, fetched, write_until, &failed, &failed_part);
    }
    if (failed != RD_KAFKA_RESP_ERR_NO_ERROR) {
        pthread_mutex_lock(&self->ring);
        add_failure(&self->delivery_failures, failed_part, failed, 1, rd_kafka_err2str(failed));
        pthread_mutex_unlock(&self->ring);
    }
    rd_kafka_poll(self->producer, 0);
    pthread_mutex_unlock(&self->client);
    Py_END_ALLOW_THREADS
    free(batch);
    return Py_BuildValue("(nn)", (Py_ssize_t)sent, (Py_ssize_t)fetched);
}

/* assign(starts): fetch each partition from its start (a list in the order of the parts; -2 is the
 * earliest offset). Once: the copy's clients are made before its starts are known (a copier's claim
 * waits for the partitions' release meanwhile), so the copy starts without their set-up. */
static PyObject *NativeCopy_assign(NativeCopy *self, PyObject *args) {
    PyObject *starts;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &starts) || check_open(self) != 0)
        return NULL;
    if (self->assigned) {
        PyErr_SetString(PyExc_RuntimeError, "a native copy is assigned its partitions once");
        return NULL;
    }
    if (PyList_GET_SIZE(starts) != self->nparts) {
        PyErr_Format(PyExc_ValueError, "%zd starts for %zd partitions", PyList_GET_SIZE(starts), self->nparts);
        return NULL;
    }
    rd_kafka_topic_partition_list_t *assignment = rd_kafka_topic_partition_list_new((int)self->nparts);
    if (assignment == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < self->nparts; i++) {
        long long start = PyLong_AsLongLong(PyList_GET_ITEM(starts, i));
        if (start == -1 && PyErr_Occurred()) {
            rd_kafka_topic_partition_list_destroy(assignment);
            return NULL;
        }
        rd_kafka_topic_partition_list_add(assignment, self->parts[i].topic, self->parts[i].partition)->offset =
            start < 0 ? RD_KAFKA_OFFSET_BEGINNING : start;
    }
    rd_kafka_resp_err_t err;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->client);
    err = self->closed ? RD_KAFKA_RESP_ERR__DESTROY : rd_kafka_assign(self->consumer, assignment);
    pthread_mutex_unlock(&self->client);
    Py_END_ALLOW_THREADS
    rd_kafka_topic_partition_list_destroy(assignment);
    if (err) {
        PyErr_Format(PyExc_ValueError, "assigning the source partitions: %s", rd_kafka_err2str(err));
        return NULL;
    }
    self->assigned = 1;
    Py_RETURN_NONE;
}

/* failures() -> (read failures, delivery failures) since the last call: lists of
 * (part index, librdkafka error code, fatal, text); a record librdkafka refused to take is fatal. */
static PyObject *NativeCopy_failures(NativeCopy *self, PyObject *noargs) {
    (void)noargs;
    lock_ring(self);
    PyObject *reads = failure_list(&self->read_failures);
    PyObject *deliveries = reads ? failure_list(&self->delivery_failures) : NULL;
    pthread_mutex_unlock(&self->ring);
    if (deliveries == NULL) {
        Py_XDECREF(reads);
        return NULL;
    }
    return Py_BuildValue("(NN)", reads, deliveries);
}

/* poll(timeout): serve the target's acknowledgements for up to timeout s. */
static PyObject *NativeCopy_poll(NativeCopy *self, PyObject *args) {
    double timeout;
    if (!PyArg_ParseTuple(args, "d", &timeout) || check_open(self) != 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->client);
    rd_kafka_poll(self->producer, (int)(timeout * 1000));
    pthread_mutex_unlock(&self->client);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* take(part) -> (source offsets, timestamps, target offsets, acknowledgement times): the leading run of
 * acknowledged records, as bytes of native int64 (times: float64), removed from the ring. */
static PyObject *NativeCopy_take(NativeCopy *self, PyObject *args) {
    Py_ssize_t index;
    if (part_index(self, args, &index) != 0)
        return NULL;
    lock_ring(self);
    Part *part = &self->parts[index];
    size_t done = 0;
    while (done < part->len && slot_at(part, done)->acked)
        done++;
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(done * 8));
    PyObject *timestamps = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(done * 8));
    PyObject *targets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(done * 8));
    PyObject *times = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(done * 8));
    if (offsets && timestamps && targets && times) {
        int64_t *o = (int64_t *)PyBytes_AS_STRING(offsets), *s = (int64_t *)PyBytes_AS_STRING(timestamps);
        int64_t *t = (int64_t *)PyBytes_AS_STRING(targets);
        double *a = (double *)PyBytes_AS_STRING(times);
        for (size_t i = 0; i < done; i++) {
            Slot *slot = slot_at(part, i);
            o[i] = slot->offset;
            s[i] = slot->timestamp;
            t[i] = slot->target;
            a[i] = slot->ack_time;
        }
        part->head = (part->head + done) % (part->cap ? part->cap : 1);
        part->len -= done;
        part->base_seq += done;
    }
    pthread_mutex_unlock(&self->ring);
    if (!(offsets && timestamps && targets && times)) {
        Py_XDECREF(offsets);
        Py_XDECREF(timestamps);
        Py_XDECREF(targets);
        Py_XDECREF(times);
        return NULL;
    }
    return Py_BuildValue("(NNNN)", offsets, timestamps, targets, times);
}

/* state(part) -> (records sent and not taken, first of them (-1: none), last offset sent (-1: none),
 * bytes sent, end of partition seen (-1: none)) */
static PyObject *NativeCopy_state(NativeCopy *self, PyObject *args) {
    Py_ssize_t index;
    if (part_index(self, args, &index) != 0)
        return NULL;
    lock_ring(self);
    Part *part = &self->parts[index];
    long long first = part->len ? (long long)slot_at(part, 0)->offset : -1;
    PyObject *state = Py_BuildValue("(nLLLL)", (Py_ssize_t)part->len, first, (long long)part->last_sent,
                                    (long long)part->bytes, (long long)part->reached);
    pthread_mutex_unlock(&self->ring);
    return state;
}

/* changed() -> the indices of the partitions that moved (a record sent, acknowledged or failed, the
 * end seen further) since the last call: a wide copy settles and reports those, not every partition. */
static PyObject *NativeCopy_changed(NativeCopy *self, PyObject *noargs) {
    (void)noargs;
    PyObject *moved = PyList_New(0);
    if (moved == NULL)
        return NULL;
    lock_ring(self);
    for (Py_ssize_t i = 0; i < self->nparts; i++) {
        if (!self->parts[i].moved)
            continue;
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL || PyList_Append(moved, index) != 0) {
            Py_XDECREF(index);
            pthread_mutex_unlock(&self->ring);
            Py_DECREF(moved);
            return NULL;
        }
        Py_DECREF(index);
        self->parts[i].moved = 0;
    }
    pthread_mutex_unlock(&self->ring);
    return moved;
}

/* drop(part): copy no more of it (its topic is gone from the source). */
static PyObject *NativeCopy_drop(NativeCopy *self, PyObject *args) {
    Py_ssize_t index;
    if (part_index(self, args, &index) != 0)
        return NULL;
    lock_ring(self);
    if (!self->parts[index].gone) {
        self->parts[index].gone = 1;
        self->active--;
    }
    Py_ssize_t active = self->active;
    pthread_mutex_unlock(&self->ring);
    return PyLong_FromSsize_t(active);
}

/* watermarks(part) -> (low, high) as the last fetch reported them (-1: unknown), no request. */
static PyObject *NativeCopy_watermarks(NativeCopy *self, PyObject *args) {
    Py_ssize_t index;
    int64_t low = -1, high = -1;
    if (part_index(self, args, &index) != 0 || check_open(self) != 0)
        return NULL;
    if (rd_kafka_get_watermark_offsets(self->consumer, self->parts[index].topic, self->parts[index].partition,
                                       &low, &high) != RD_KAFKA_RESP_ERR_NO_ERROR)
        low = high = -1;
    return Py_BuildValue("(LL)", (long long)low, (long long)high);
}

/* flush(timeout) -> records not yet acknowledged (0: the target has everything sent). */
static PyObject *NativeCopy_flush(NativeCopy *self, PyObject *args) {
    double timeout;
    if (!PyArg_ParseTuple(args, "d", &timeout) || check_open(self) != 0)
        return NULL;
    int remaining;
    Py_BEGIN_ALLOW_THREADS
    double deadline = wall_clock() + timeout;
    for (;;) {
        pthread_mutex_lock(&self->client);
        rd_kafka_flush(self->producer, 100);
        remaining = rd_kafka_outq_len(self->producer);
        pthread_mutex_unlock(&self->client);
        if (remaining == 0 || wall_clock() >= deadline)
            break;
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(remaining);
}

/* produce(topic, partition, key, value, headers) -> librdkafka error code (0: queued). A record that is
 * not a copy (progress, offset syncs) through the copy's own producer, so that it joins the copy's open
 * transaction; headers is a list of (name, bytes). Its delivery is not tracked here: in a transaction a
 * record that failed fails the commit. */
static PyObject *NativeCopy_produce(NativeCopy *self, PyObject *args) {
    const char *topic;
    int partition;
    const char *key = NULL, *value = NULL;
    Py_ssize_t key_len = 0, value_len = 0;
    PyObject *given;
    if (!PyArg_ParseTuple(args, "siz#z#O!", &topic, &partition, &key, &key_len, &value, &value_len, &PyList_Type,
                          &given) || check_open(self) != 0)
        return NULL;
    rd_kafka_headers_t *headers = rd_kafka_headers_new((size_t)PyList_GET_SIZE(given));
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(given); i++) {
        const char *name, *header;
        Py_ssize_t header_len;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(given, i), "sy#", &name, &header, &header_len)) {
            rd_kafka_headers_destroy(headers);
            return NULL;
        }
        rd_kafka_header_add(headers, name, -1, header, header_len);
    }
    rd_kafka_resp_err_t err;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->client);
    err = self->closed ? RD_KAFKA_RESP_ERR__DESTROY
                       : rd_kafka_producev(self->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
                                           RD_KAFKA_V_KEY(key, (size_t)key_len),
                                           RD_KAFKA_V_VALUE((void *)value, (size_t)value_len),
                                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers),
                                           RD_KAFKA_V_OPAQUE((void *)(uintptr_t)OTHER_RECORD), RD_KAFKA_V_END);
    pthread_mutex_unlock(&self->client);
    Py_END_ALLOW_THREADS
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_headers_destroy(headers); /* taken by the producer only when queued */
    return PyLong_FromLong((long)err);
}

/* transaction(step, timeout) -> None, or (code, text, fatal, retriable, abortable) when it failed.
 * step: "init" (fences every earlier producer of the transactional.id, aborting its open transaction),
 * "begin", "commit" (flushes what was sent first) or "abort". */
static PyObject *NativeCopy_transaction(NativeCopy *self, PyObject *args) {
    const char *step;
    double timeout;
    if (!PyArg_ParseTuple(args, "sd", &step, &timeout) || check_open(self) != 0)
        return NULL;
    int ms = (int)(timeout * 1000);
    int known = 1;
    rd_kafka_error_t *error = NULL;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->client);
    if (self->closed)
        error = rd_kafka_error_new(RD_KAFKA_RESP_ERR__DESTROY, "the native copy is closed");
    else if (strcmp(step, "init") == 0)
        error = rd_kafka_init_transactions(self->producer, ms);
    else if (strcmp(step, "begin") == 0)
        error = rd_kafka_begin_transaction(self->producer);
    else if (strcmp(step, "commit") == 0)
        error = rd_kafka_commit_transaction(self->producer, ms);
    else if (strcmp(step, "abort") == 0)
        error = rd_kafka_abort_transaction(self->producer, ms);
    else
        known = 0;
    pthread_mutex_unlock(&self->client);
    Py_END_ALLOW_THREADS
    if (!known) {
        PyErr_Format(PyExc_ValueError, "no transaction step %s", step);
        return NULL;
    }
    if (error == NULL)
        Py_RETURN_NONE;
    PyObject *result = Py_BuildValue("(iNiii)", (int)rd_kafka_error_code(error), text_of(rd_kafka_error_string(error)),
                                     rd_kafka_error_is_fatal(error), rd_kafka_error_is_retriable(error),
                                     rd_kafka_error_txn_requires_abort(error));
    rd_kafka_error_destroy(error);
    return result;
}

/* logs() -> [(syslog level, facility, text)] of both clients since the last call. */
static PyObject *NativeCopy_logs(NativeCopy *self, PyObject *noargs) {
    (void)noargs;
    pthread_mutex_lock(&self->log_lock);
    size_t count = self->nlogs, dropped = self->logs_dropped;
    LogLine *lines = malloc((count ? count : 1) * sizeof(LogLine));
    if (lines != NULL) {
        memcpy(lines, self->logs, count * sizeof(LogLine));
        self->nlogs = self->logs_dropped = 0;
    }
    pthread_mutex_unlock(&self->log_lock);
    if (lines == NULL)
        return PyErr_NoMemory();
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list != NULL && i <= count; i++) {
        PyObject *item = NULL;
        if (i < count) {
            item = Py_BuildValue("(iNN)", lines[i].level, text_of(lines[i].facility), text_of(lines[i].text));
        } else if (dropped) {
            char text[96];
            snprintf(text, sizeof(text), "%zu more librdkafka log lines dropped", dropped);
            item = Py_BuildValue("(iss)", 4, "LOG", text);
        } else {
            break;
        }
        if (item == NULL || PyList_Append(list, item) != 0)
            Py_CLEAR(list);
        Py_XDECREF(item);
    }
    free(lines);
    return list;
}

/* close(): leave the source and end both clients (flush first what must reach the target). */
static PyObject *NativeCopy_close(NativeCopy *self, PyObject *noargs) {
    (void)noargs;
    if (self->closed)
        Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->client);
    self->closed = 1;
    release_all(self);
    pthread_mutex_unlock(&self->client);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef NativeCopy_methods[] = {
    {"assign", (PyCFunction)NativeCopy_assign, METH_VARARGS, "Fetch each partition from its start (once)."},
    {"copy", (PyCFunction)NativeCopy_copy, METH_VARARGS, "Send held records, then consume and send a batch."},
    {"failures", (PyCFunction)NativeCopy_failures, METH_NOARGS, "Read and delivery failures since the last call."},
    {"poll", (PyCFunction)NativeCopy_poll, METH_VARARGS, "Serve the target's acknowledgements."},
    {"take", (PyCFunction)NativeCopy_take, METH_VARARGS, "Take a partition's leading acknowledged records."},
    {"state", (PyCFunction)NativeCopy_state, METH_VARARGS, "A partition's unsettled records and positions."},
    {"changed", (PyCFunction)NativeCopy_changed, METH_NOARGS, "The partitions that moved since the last call."},
    {"drop", (PyCFunction)NativeCopy_drop, METH_VARARGS, "Copy no more of a partition; how many are left."},
    {"watermarks", (PyCFunction)NativeCopy_watermarks, METH_VARARGS, "A partition's cached watermarks."},
    {"flush", (PyCFunction)NativeCopy_flush, METH_VARARGS, "Wait for the target's acknowledgements."},
    {"produce", (PyCFunction)NativeCopy_produce, METH_VARARGS, "Queue a record that is not a copy (progress, syncs)."},
    {"transaction", (PyCFunction)NativeCopy_transaction, METH_VARARGS, "A step of the producer's transactions."},
    {"logs", (PyCFunction)NativeCopy_logs, METH_NOARGS, "The clients' log lines since the last call."},
    {"close", (PyCFunction)NativeCopy_close, METH_NOARGS, "End both clients."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject NativeCopyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "strait_replicator._copyloop.NativeCopy",
    .tp_doc = "Copies source partitions to the target in C; Python settles what the target acknowledged.",
    .tp_basicsize = sizeof(NativeCopy),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = NativeCopy_new,
    .tp_init = (initproc)NativeCopy_init,
    .tp_dealloc = (destructor)NativeCopy_dealloc,
    .tp_methods = NativeCopy_methods,
};

static struct PyModuleDef copyloop_module = {
    PyModuleDef_HEAD_INIT, "_copyloop", "strait's copy loop on librdkafka.", -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__copyloop(void) {
    if (PyType_Ready(&NativeCopyType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&copyloop_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&NativeCopyType);
    if (PyModule_AddObject(module, "NativeCopy", (PyObject *)&NativeCopyType) < 0) {
        Py_DECREF(&NativeCopyType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
