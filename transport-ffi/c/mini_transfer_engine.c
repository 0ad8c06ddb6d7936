/* See mini_transfer_engine.h for the contract; the cross-process half is in
 * mini_transfer_engine_net.c. */
#include "mini_transfer_engine.h"
#include "mini_transfer_engine_net.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAME MTE_MAX_NAME
#define METADATA_SCHEME "file://"

struct region {
    struct engine *owner;
    char *addr;
    size_t length;
    int exported;            /* 1: a segment named `name` */
    char name[MAX_NAME + 1];
    struct region *next;
};

struct opened {
    int in_use;
    char name[MAX_NAME + 1];
    char endpoint[MTE_MAX_ENDPOINT + 1]; /* "" for a segment of this process */
};

struct batch {
    int in_use;
    size_t capacity;
    size_t submitted;
    struct transfer_status *statuses;
};

struct engine {
    char server_name[MAX_NAME + 1];
    char metadata_dir[MTE_MAX_PATH];     /* "" without a file:// metadata directory */
    char host[MTE_MAX_ENDPOINT + 1];
    uint64_t rpc_port;
    struct mte_listener *listener;       /* started by the first export */
    char endpoint[MTE_MAX_ENDPOINT + 1]; /* the listener's, once started */
    int transport_installed;
    struct opened *segments;
    size_t segment_count;
    struct batch *batches;
    size_t batch_count;
};

/* One lock for everything: regions are shared by all engines of the process. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct region *regions = NULL;
static char transport_token;

static struct region *find_segment(const char *name) {
    for (struct region *r = regions; r; r = r->next)
        if (r->exported && strcmp(r->name, name) == 0) return r;
    return NULL;
}

/* Whether [addr, addr + length) lies inside memory registered by `e` (overflow-safe). */
static int source_registered(struct engine *e, const void *addr, uint64_t length) {
    uintptr_t a = (uintptr_t)addr;
    for (struct region *r = regions; r; r = r->next) {
        uintptr_t base = (uintptr_t)r->addr;
        if (r->owner != e || a < base) continue;
        uint64_t off = (uint64_t)(a - base);
        if (off <= r->length && length <= r->length - off) return 1;
    }
    return 0;
}

transfer_engine_t createTransferEngine(const char *metadata_conn_string,
                                       const char *local_server_name,
                                       const char *ip_or_host_name,
                                       uint64_t rpc_port, int auto_discover) {
    (void)auto_discover;
    if (!local_server_name || strlen(local_server_name) > MAX_NAME) return NULL;
    const char *dir = "";
    size_t scheme = strlen(METADATA_SCHEME);
    if (metadata_conn_string && strncmp(metadata_conn_string, METADATA_SCHEME, scheme) == 0) {
        dir = metadata_conn_string + scheme;
        if (dir[0] != '/' || strlen(dir) >= MTE_MAX_PATH - 2 * MAX_NAME) return NULL;
    }
    const char *host = ip_or_host_name && *ip_or_host_name ? ip_or_host_name : "127.0.0.1";
    if (strlen(host) > MTE_MAX_ENDPOINT - 8 || rpc_port > 65535) return NULL;
    struct engine *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    strcpy(e->server_name, local_server_name);
    strcpy(e->metadata_dir, dir);
    strcpy(e->host, host);
    e->rpc_port = rpc_port;
    return e;
}

/* Makes exported segment `name` reachable from other processes: the listener (started on the
 * first export) and its metadata entry. No-op without a metadata directory. Holds `lock`. */
static int publish_segment(struct engine *e, const char *name) {
    if (!e->metadata_dir[0]) return 0;
    if (!e->listener) {
        e->listener = mte_listener_start(e->host, e->rpc_port, e->endpoint, sizeof e->endpoint);
        if (!e->listener) return -1;
    }
    return mte_metadata_publish(e->metadata_dir, name, e->endpoint);
}

int mte_exported_copy(const char *name, uint64_t offset, void *buf, uint64_t len, int write) {
    int rc = MTE_OK;
    pthread_mutex_lock(&lock);
    struct region *seg = find_segment(name);
    if (!seg)
        rc = MTE_NOT_FOUND;
    else if (offset > seg->length || len > seg->length - offset)
        rc = MTE_OUT_OF_RANGE;
    else if (buf && write)
        memmove(seg->addr + offset, buf, len);
    else if (buf)
        memmove(buf, seg->addr + offset, len);
    pthread_mutex_unlock(&lock);
    return rc;
}

transport_t installTransport(transfer_engine_t engine, const char *proto, void **args) {
    (void)args;
    struct engine *e = engine;
    if (!e || !proto) return NULL;
    if (strcmp(proto, "tcp") != 0 && strcmp(proto, "memcpy") != 0) return NULL;
    pthread_mutex_lock(&lock);
    e->transport_installed = 1;
    pthread_mutex_unlock(&lock);
    return &transport_token;
}

int uninstallTransport(transfer_engine_t engine, const char *proto) {
    (void)proto;
    struct engine *e = engine;
    if (!e) return -1;
    pthread_mutex_lock(&lock);
    e->transport_installed = 0;
    pthread_mutex_unlock(&lock);
    return 0;
}

int registerLocalMemory(transfer_engine_t engine, void *addr, size_t length,
                        const char *location, int remote_accessible) {
    struct engine *e = engine;
    if (!e || !addr || length == 0) return -1;
    if (remote_accessible && (!location || !*location || strlen(location) > MAX_NAME)) return -1;
    pthread_mutex_lock(&lock);
    struct region *r = NULL;
    if ((remote_accessible && find_segment(location)) || !(r = calloc(1, sizeof *r)) ||
        (remote_accessible && publish_segment(e, location) != 0)) {
        pthread_mutex_unlock(&lock);
        free(r);
        return -1;
    }
    r->owner = e;
    r->addr = addr;
    r->length = length;
    r->exported = remote_accessible ? 1 : 0;
    if (remote_accessible) strcpy(r->name, location);
    r->next = regions;
    regions = r;
    pthread_mutex_unlock(&lock);
    return 0;
}

int unregisterLocalMemory(transfer_engine_t engine, void *addr) {
    struct engine *e = engine;
    int rc = -1;
    pthread_mutex_lock(&lock);
    for (struct region **p = &regions; *p; p = &(*p)->next) {
        if ((*p)->owner == e && (*p)->addr == addr) {
            struct region *gone = *p;
            *p = gone->next;
            if (gone->exported && e->metadata_dir[0])
                mte_metadata_withdraw(e->metadata_dir, gone->name, e->endpoint);
            free(gone);
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

segment_id_t openSegment(transfer_engine_t engine, const char *segment_name) {
    struct engine *e = engine;
    if (!e || !segment_name || !*segment_name || strlen(segment_name) > MAX_NAME) return -1;
    segment_id_t id = -1;
    /* Another process's segment, if the metadata names one (read before taking the lock;
     * a segment of this process wins below). */
    char endpoint[MTE_MAX_ENDPOINT + 2] = "";
    if (e->metadata_dir[0] &&
        mte_metadata_lookup(e->metadata_dir, segment_name, endpoint, sizeof endpoint) != 0)
        endpoint[0] = '\0';
    if (strlen(endpoint) > MTE_MAX_ENDPOINT) endpoint[0] = '\0';
    pthread_mutex_lock(&lock);
    if (find_segment(segment_name)) endpoint[0] = '\0';
    if (find_segment(segment_name) || endpoint[0]) {
        size_t slot = 0;
        while (slot < e->segment_count && e->segments[slot].in_use) slot++;
        if (slot == e->segment_count) {
            struct opened *grown = realloc(e->segments, (e->segment_count * 2 + 4) * sizeof *grown);
            if (grown) {
                memset(grown + e->segment_count, 0, (e->segment_count + 4) * sizeof *grown);
                e->segments = grown;
                e->segment_count = e->segment_count * 2 + 4;
            }
        }
        if (slot < e->segment_count && slot < INT32_MAX) {
            e->segments[slot].in_use = 1;
            strcpy(e->segments[slot].name, segment_name);
            strcpy(e->segments[slot].endpoint, endpoint);
            id = (segment_id_t)slot;
        }
    }
    pthread_mutex_unlock(&lock);
    return id;
}

int closeSegment(transfer_engine_t engine, segment_id_t segment_id) {
    struct engine *e = engine;
    int rc = -1;
    pthread_mutex_lock(&lock);
    if (e && segment_id >= 0 && (size_t)segment_id < e->segment_count &&
        e->segments[segment_id].in_use) {
        e->segments[segment_id].in_use = 0;
        rc = 0;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size) {
    struct engine *e = engine;
    if (!e || batch_size == 0) return INVALID_BATCH;
    batch_id_t id = INVALID_BATCH;
    pthread_mutex_lock(&lock);
    size_t slot = 0;
    while (slot < e->batch_count && e->batches[slot].in_use) slot++;
    if (slot == e->batch_count) {
        struct batch *grown = realloc(e->batches, (e->batch_count * 2 + 4) * sizeof *grown);
        if (grown) {
            memset(grown + e->batch_count, 0, (e->batch_count + 4) * sizeof *grown);
            e->batches = grown;
            e->batch_count = e->batch_count * 2 + 4;
        }
    }
    if (slot < e->batch_count) {
        struct transfer_status *statuses = calloc(batch_size, sizeof *statuses);
        if (statuses) {
            e->batches[slot] = (struct batch){1, batch_size, 0, statuses};
            id = (batch_id_t)slot + 1; /* ids start at 1 */
        }
    }
    pthread_mutex_unlock(&lock);
    return id;
}

static struct batch *lookup_batch(struct engine *e, batch_id_t id) {
    if (!e || id == 0 || id > e->batch_count) return NULL;
    struct batch *b = &e->batches[id - 1];
    return b->in_use ? b : NULL;
}

/* A task for another process's segment, run after `lock` is released. */
struct remote_task {
    struct transfer_status *status;
    struct transfer_request req;
    char name[MAX_NAME + 1];
    char endpoint[MTE_MAX_ENDPOINT + 1];
};

/* Runs one task under `lock`: local segments are copied at once; a remote one is queued in
 * `remote` (its status PENDING) and 1 returned. */
static int start_task(struct engine *e, struct transfer_request *req, struct transfer_status *st,
                      struct remote_task *remote) {
    st->transferred_bytes = 0;
    if ((req->opcode != OPCODE_READ && req->opcode != OPCODE_WRITE) || !req->source ||
        !source_registered(e, req->source, req->length) || req->target_id < 0 ||
        (size_t)req->target_id >= e->segment_count || !e->segments[req->target_id].in_use) {
        st->status = STATUS_INVALID;
        return 0;
    }
    struct opened *target = &e->segments[req->target_id];
    if (target->endpoint[0]) {
        *remote = (struct remote_task){st, *req, "", ""};
        strcpy(remote->name, target->name);
        strcpy(remote->endpoint, target->endpoint);
        st->status = STATUS_PENDING;
        return 1;
    }
    struct region *seg = find_segment(target->name);
    if (!seg) {
        st->status = STATUS_FAILED;
        return 0;
    }
    if (req->target_offset > seg->length || req->length > seg->length - req->target_offset) {
        st->status = STATUS_INVALID;
        return 0;
    }
    char *addr = seg->addr + req->target_offset;
    if (req->opcode == OPCODE_WRITE)
        memmove(addr, req->source, req->length);
    else
        memmove(req->source, addr, req->length);
    st->status = STATUS_COMPLETED;
    st->transferred_bytes = req->length;
    return 0;
}

/* Runs the remote tasks over the network without `lock` (a peer may be serving us while we
 * serve it), then records each status. The caller keeps the batch until every status is final
 * (the ABI's contract), so the status slots stay valid. */
static void run_remote(struct remote_task *tasks, size_t count) {
    struct mte_conn conn = {-1, ""};
    for (size_t i = 0; i < count; i++) {
        struct transfer_request *r = &tasks[i].req;
        int status = mte_remote_transfer(&conn, tasks[i].endpoint, tasks[i].name, r->opcode,
                                         r->target_offset, r->source, r->length);
        pthread_mutex_lock(&lock);
        tasks[i].status->transferred_bytes = status == STATUS_COMPLETED ? r->length : 0;
        tasks[i].status->status = status;
        pthread_mutex_unlock(&lock);
    }
    mte_conn_close(&conn);
}

int submitTransfer(transfer_engine_t engine, batch_id_t batch_id,
                   struct transfer_request *entries, size_t count) {
    struct engine *e = engine;
    struct remote_task *remote = NULL;
    size_t remote_count = 0;
    pthread_mutex_lock(&lock);
    struct batch *b = lookup_batch(e, batch_id);
    if (!b || !e->transport_installed || (count > 0 && !entries) ||
        count > b->capacity - b->submitted || (count > 0 && !(remote = calloc(count, sizeof *remote)))) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    for (size_t i = 0; i < count; i++)
        remote_count += (size_t)start_task(e, &entries[i], &b->statuses[b->submitted + i],
                                           &remote[remote_count]);
    b->submitted += count;
    pthread_mutex_unlock(&lock);
    run_remote(remote, remote_count);
    free(remote);
    return 0;
}

int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id, size_t task_id,
                      struct transfer_status *status) {
    struct engine *e = engine;
    int rc = -1;
    pthread_mutex_lock(&lock);
    struct batch *b = lookup_batch(e, batch_id);
    if (b && status && task_id < b->submitted) {
        *status = b->statuses[task_id];
        rc = 0;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int freeBatchID(transfer_engine_t engine, batch_id_t batch_id) {
    struct engine *e = engine;
    int rc = -1;
    pthread_mutex_lock(&lock);
    struct batch *b = lookup_batch(e, batch_id);
    if (b) {
        free(b->statuses);
        *b = (struct batch){0, 0, 0, NULL};
        rc = 0;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void destroyTransferEngine(transfer_engine_t engine) {
    struct engine *e = engine;
    if (!e) return;
    pthread_mutex_lock(&lock);
    for (struct region **p = &regions; *p;) {
        if ((*p)->owner == e) {
            struct region *gone = *p;
            *p = gone->next;
            if (gone->exported && e->metadata_dir[0])
                mte_metadata_withdraw(e->metadata_dir, gone->name, e->endpoint);
            free(gone);
        } else {
            p = &(*p)->next;
        }
    }
    for (size_t i = 0; i < e->batch_count; i++) free(e->batches[i].statuses);
    pthread_mutex_unlock(&lock);
    mte_listener_stop(e->listener);
    free(e->batches);
    free(e->segments);
    free(e);
}
