/* See mini_transfer_engine.h for the contract. */
#include "mini_transfer_engine.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAME 256

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
};

struct batch {
    int in_use;
    size_t capacity;
    size_t submitted;
    struct transfer_status *statuses;
};

struct engine {
    char server_name[MAX_NAME + 1];
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
    (void)metadata_conn_string; (void)ip_or_host_name; (void)rpc_port; (void)auto_discover;
    if (!local_server_name || strlen(local_server_name) > MAX_NAME) return NULL;
    struct engine *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    strcpy(e->server_name, local_server_name);
    return e;
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
    if (remote_accessible && find_segment(location)) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    struct region *r = calloc(1, sizeof *r);
    if (!r) {
        pthread_mutex_unlock(&lock);
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
    if (!e || !segment_name || strlen(segment_name) > MAX_NAME) return -1;
    segment_id_t id = -1;
    pthread_mutex_lock(&lock);
    if (find_segment(segment_name)) {
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

int submitTransfer(transfer_engine_t engine, batch_id_t batch_id,
                   struct transfer_request *entries, size_t count) {
    struct engine *e = engine;
    int rc = 0;
    pthread_mutex_lock(&lock);
    struct batch *b = lookup_batch(e, batch_id);
    if (!b || !e->transport_installed || (count > 0 && !entries) ||
        count > b->capacity - b->submitted) {
        rc = -1;
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        struct transfer_request *req = &entries[i];
        struct transfer_status *st = &b->statuses[b->submitted + i];
        st->transferred_bytes = 0;
        if ((req->opcode != OPCODE_READ && req->opcode != OPCODE_WRITE) || !req->source ||
            !source_registered(e, req->source, req->length) || req->target_id < 0 ||
            (size_t)req->target_id >= e->segment_count || !e->segments[req->target_id].in_use) {
            st->status = STATUS_INVALID;
            continue;
        }
        struct region *seg = find_segment(e->segments[req->target_id].name);
        if (!seg) {
            st->status = STATUS_FAILED;
            continue;
        }
        if (req->target_offset > seg->length || req->length > seg->length - req->target_offset) {
            st->status = STATUS_INVALID;
            continue;
        }
        char *target = seg->addr + req->target_offset;
        if (req->opcode == OPCODE_WRITE)
            memmove(target, req->source, req->length);
        else
            memmove(req->source, target, req->length);
        st->status = STATUS_COMPLETED;
        st->transferred_bytes = req->length;
    }
    b->submitted += count;
out:
    pthread_mutex_unlock(&lock);
    return rc;
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
            free(gone);
        } else {
            p = &(*p)->next;
        }
    }
    for (size_t i = 0; i < e->batch_count; i++) free(e->batches[i].statuses);
    pthread_mutex_unlock(&lock);
    free(e->batches);
    free(e->segments);
    free(e);
}
