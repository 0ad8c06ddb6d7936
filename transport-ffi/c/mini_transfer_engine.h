/*
 * mini_transfer_engine: a small implementation of the transfer-engine C API (the shape of
 * Mooncake's transfer_engine_c.h in which struct transfer_request has no file_id member and
 * registerLocalMemory takes no remote_atomic argument). Build both sources into one library:
 *   cc -shared -fPIC -O2 -o libmini_transfer_engine.so \
 *      mini_transfer_engine.c mini_transfer_engine_net.c -lpthread
 *
 * Conventions used by Crescent's FfiTransport:
 *   - registerLocalMemory(engine, addr, len, location, remote_accessible = 1) exports the
 *     region as a segment named `location`, visible to every engine of the process;
 *   - registerLocalMemory(..., remote_accessible = 0) registers a plain local buffer;
 *   - openSegment(engine, name) returns a handle (>= 0) for an exported segment, -1 if unknown;
 *   - target_offset is the offset inside the segment.
 *
 * Across processes: createTransferEngine's metadata_conn_string "file:///abs/dir" names a
 * metadata directory shared by the engines of every process (any other value, e.g.
 * "P2PHANDSHAKE", keeps the engine in-process only). The first export then starts a listener
 * thread on ip_or_host_name:rpc_port (port 0: an ephemeral one) and every export writes
 * `dir/<segment name>` = "host:port" (see mini_transfer_engine_net.h for the file naming and
 * the wire protocol); unregistering it, or destroying the engine, removes the entry.
 * openSegment looks for a segment of this process first, then in the metadata directory.
 * submitTransfer copies local segments at once and runs the remote tasks over TCP before it
 * returns (so every status is final when it returns; getTransferStatus reports them).
 *
 * Bounds are checked on both sides: a source outside the engine's registered memory, or a
 * target range outside the segment (checked by the serving process for a remote segment),
 * completes the task with STATUS_INVALID; a segment that was unregistered after openSegment,
 * or a serving process that cannot be reached, completes it with STATUS_FAILED. Nothing is
 * copied then. Every call is thread-safe (one process-wide mutex, never held across network
 * IO). The listener has no authentication: serve only on networks trusted with the segments.
 */
#ifndef MINI_TRANSFER_ENGINE_H
#define MINI_TRANSFER_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define segment_handle_t int32_t
#define segment_id_t int32_t
#define batch_id_t uint64_t
#define LOCAL_SEGMENT (0)
#define INVALID_BATCH UINT64_MAX

#define OPCODE_READ (0)
#define OPCODE_WRITE (1)

struct transfer_request {
    int opcode;
    void *source;
    segment_id_t target_id;
    uint64_t target_offset;
    uint64_t length;
};
typedef struct transfer_request transfer_request_t;

#define STATUS_WAITING (0)
#define STATUS_PENDING (1)
#define STATUS_INVALID (2)
#define STATUS_CANCELED (3)
#define STATUS_COMPLETED (4)
#define STATUS_TIMEOUT (5)
#define STATUS_FAILED (6)

struct transfer_status {
    int status;
    uint64_t transferred_bytes;
};
typedef struct transfer_status transfer_status_t;

typedef void *transfer_engine_t;
typedef void *transport_t;

transfer_engine_t createTransferEngine(const char *metadata_conn_string,
                                       const char *local_server_name,
                                       const char *ip_or_host_name,
                                       uint64_t rpc_port, int auto_discover);
transport_t installTransport(transfer_engine_t engine, const char *proto, void **args);
int uninstallTransport(transfer_engine_t engine, const char *proto);
segment_id_t openSegment(transfer_engine_t engine, const char *segment_name);
int closeSegment(transfer_engine_t engine, segment_id_t segment_id);
void destroyTransferEngine(transfer_engine_t engine);
int registerLocalMemory(transfer_engine_t engine, void *addr, size_t length,
                        const char *location, int remote_accessible);
int unregisterLocalMemory(transfer_engine_t engine, void *addr);
batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size);
int submitTransfer(transfer_engine_t engine, batch_id_t batch_id,
                   struct transfer_request *entries, size_t count);
int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id, size_t task_id,
                      struct transfer_status *status);
int freeBatchID(transfer_engine_t engine, batch_id_t batch_id);

#ifdef __cplusplus
}
#endif

#endif /* MINI_TRANSFER_ENGINE_H */
