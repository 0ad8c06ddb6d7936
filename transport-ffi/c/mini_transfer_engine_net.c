/* The cross-process half of mini_transfer_engine: see mini_transfer_engine_net.h. */
#define _GNU_SOURCE
#include "mini_transfer_engine_net.h"
#include "mini_transfer_engine.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define HEADER_LEN 24
#define CHUNK (1u << 20)
#define IO_TIMEOUT_S 30

/* ---- byte IO ------------------------------------------------------------------------------ */

static int send_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int recv_all(int fd, void *buf, size_t len) {
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void put_u16(unsigned char *p, uint16_t v) { p[0] = v & 0xff; p[1] = v >> 8; }
static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (v >> (8 * i)) & 0xff;
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (v >> (8 * i)) & 0xff;
}
static uint16_t get_u16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void set_timeouts(int fd, int seconds) {
    struct timeval tv = {seconds, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* ---- serving -------------------------------------------------------------------------------- */

/* Moves `length` bytes of an accepted request in chunks, each copied under the engine lock
 * after checking the segment again. Returns the final status, or -1 if the connection broke. */
static int serve_payload(int fd, const char *name, int opcode, uint64_t offset, uint64_t length,
                         char *chunk) {
    int status = MTE_OK;
    for (uint64_t done = 0; done < length;) {
        size_t n = length - done < CHUNK ? (size_t)(length - done) : CHUNK;
        if (opcode == OPCODE_READ) {
            /* After MTE_OK the reader expects every byte: a vanished segment ends the
             * connection instead. */
            if (mte_exported_copy(name, offset + done, chunk, n, 0) != MTE_OK) return -1;
            if (send_all(fd, chunk, n) != 0) return -1;
        } else {
            if (recv_all(fd, chunk, n) != 0) return -1;
            if (status == MTE_OK) status = mte_exported_copy(name, offset + done, chunk, n, 1);
        }
        done += n;
    }
    return status;
}

/* One request; 0 to keep serving the connection, -1 to close it. */
static int serve_request(int fd, char *chunk) {
    unsigned char header[HEADER_LEN];
    char name[MTE_MAX_NAME + 1];
    if (recv_all(fd, header, HEADER_LEN) != 0) return -1;
    int opcode = header[4];
    uint16_t name_len = get_u16(header + 6);
    uint64_t offset = get_u64(header + 8), length = get_u64(header + 16);
    if (get_u32(header) != MTE_MAGIC || name_len == 0 || name_len > MTE_MAX_NAME) return -1;
    if (recv_all(fd, name, name_len) != 0) return -1;
    name[name_len] = '\0';
    unsigned char status = MTE_BAD_REQUEST;
    if ((opcode == OPCODE_READ || opcode == OPCODE_WRITE) && strlen(name) == name_len)
        status = (unsigned char)mte_exported_copy(name, offset, NULL, length, 0);
    if (send_all(fd, &status, 1) != 0) return -1;
    if (status != MTE_OK) return 0;
    int final = serve_payload(fd, name, opcode, offset, length, chunk);
    if (final < 0) return -1;
    if (opcode == OPCODE_WRITE) {
        status = (unsigned char)final;
        if (send_all(fd, &status, 1) != 0) return -1;
    }
    return 0;
}

static void *serve_connection(void *arg) {
    int fd = (int)(intptr_t)arg;
    char *chunk = malloc(CHUNK);
    set_timeouts(fd, 2 * IO_TIMEOUT_S);
    while (chunk && serve_request(fd, chunk) == 0) {
    }
    free(chunk);
    close(fd);
    return NULL;
}

struct mte_listener {
    int fd;
    int stopping; /* read and written atomically */
    pthread_t thread;
};

static void *accept_loop(void *arg) {
    struct mte_listener *l = arg;
    while (!__atomic_load_n(&l->stopping, __ATOMIC_ACQUIRE)) {
        int fd = accept(l->fd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (__atomic_load_n(&l->stopping, __ATOMIC_ACQUIRE)) break;
            usleep(10000); /* e.g. EMFILE: back off rather than spin */
            continue;
        }
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, serve_connection, (void *)(intptr_t)fd) != 0) close(fd);
        pthread_attr_destroy(&attr);
    }
    return NULL;
}

/* "host:port" split at the last colon ("[v6]:port" loses its brackets). */
static int split_endpoint(const char *endpoint, char *host, size_t host_size, char *port) {
    const char *colon = strrchr(endpoint, ':');
    if (!colon || colon == endpoint || strlen(colon + 1) == 0 || strlen(colon + 1) > 5) return -1;
    const char *start = endpoint, *end = colon;
    if (*start == '[' && end[-1] == ']') start++, end--;
    if ((size_t)(end - start) >= host_size) return -1;
    memcpy(host, start, (size_t)(end - start));
    host[end - start] = '\0';
    strcpy(port, colon + 1);
    return 0;
}

static int bound_port(int fd) {
    struct sockaddr_storage addr;
    socklen_t len = sizeof addr;
    if (getsockname(fd, (struct sockaddr *)&addr, &len) != 0) return -1;
    if (addr.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&addr)->sin_port);
    return ntohs(((struct sockaddr_in6 *)&addr)->sin6_port);
}

static int listen_on(const char *host, uint64_t port) {
    char service[8];
    struct addrinfo hints = {0}, *res = NULL;
    if (port > 65535) return -1;
    snprintf(service, sizeof service, "%u", (unsigned)port);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(host, service, &hints, &res) != 0) return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

struct mte_listener *mte_listener_start(const char *host, uint64_t port, char *endpoint,
                                        size_t endpoint_size) {
    int fd = listen_on(host, port);
    if (fd < 0) return NULL;
    int bound = bound_port(fd);
    int written = strchr(host, ':') ? snprintf(endpoint, endpoint_size, "[%s]:%d", host, bound)
                                    : snprintf(endpoint, endpoint_size, "%s:%d", host, bound);
    struct mte_listener *l = calloc(1, sizeof *l);
    if (bound < 0 || written < 0 || (size_t)written >= endpoint_size || !l) {
        free(l);
        close(fd);
        return NULL;
    }
    l->fd = fd;
    if (pthread_create(&l->thread, NULL, accept_loop, l) != 0) {
        close(fd);
        free(l);
        return NULL;
    }
    return l;
}

void mte_listener_stop(struct mte_listener *l) {
    if (!l) return;
    __atomic_store_n(&l->stopping, 1, __ATOMIC_RELEASE);
    shutdown(l->fd, SHUT_RDWR); /* wakes accept() */
    pthread_join(l->thread, NULL);
    close(l->fd);
    free(l);
}

/* ---- metadata directory --------------------------------------------------------------------- */

static int metadata_path(const char *dir, const char *name, const char *suffix, char *path) {
    char escaped[3 * MTE_MAX_NAME + 1];
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_' || (*p == '.' && p != (const unsigned char *)name))
            escaped[n++] = (char)*p;
        else
            n += (size_t)sprintf(escaped + n, "%%%02X", *p);
    }
    escaped[n] = '\0';
    if (n > 200) return -1; /* file names stay within NAME_MAX with the suffix */
    int w = snprintf(path, MTE_MAX_PATH, "%s/%s%s", dir, escaped, suffix);
    return (w < 0 || w >= MTE_MAX_PATH) ? -1 : 0;
}

int mte_metadata_publish(const char *dir, const char *name, const char *endpoint) {
    char path[MTE_MAX_PATH], tmp[MTE_MAX_PATH], suffix[48];
    snprintf(suffix, sizeof suffix, ".tmp.%ld.%lx", (long)getpid(), (unsigned long)pthread_self());
    if (metadata_path(dir, name, "", path) != 0 || metadata_path(dir, name, suffix, tmp) != 0)
        return -1;
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    int ok = fprintf(f, "%s\n", endpoint) > 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

int mte_metadata_lookup(const char *dir, const char *name, char *endpoint, size_t size) {
    char path[MTE_MAX_PATH];
    if (metadata_path(dir, name, "", path) != 0) return -1;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *line = fgets(endpoint, (int)size, f);
    fclose(f);
    if (!line) return -1;
    endpoint[strcspn(endpoint, "\r\n")] = '\0';
    return endpoint[0] ? 0 : -1;
}

void mte_metadata_withdraw(const char *dir, const char *name, const char *endpoint) {
    char path[MTE_MAX_PATH], current[MTE_MAX_ENDPOINT + 2];
    if (metadata_path(dir, name, "", path) != 0) return;
    /* A later owner of the same name may have replaced the file: leave its entry alone. */
    if (mte_metadata_lookup(dir, name, current, sizeof current) == 0 &&
        strcmp(current, endpoint) == 0)
        unlink(path);
}

/* ---- client side ---------------------------------------------------------------------------- */

static int dial(const char *endpoint) {
    char host[MTE_MAX_ENDPOINT + 1], port[8];
    struct addrinfo hints = {0}, *res = NULL;
    if (split_endpoint(endpoint, host, sizeof host, port) != 0) return -1;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0) return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        set_timeouts(fd, IO_TIMEOUT_S);
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

void mte_conn_close(struct mte_conn *conn) {
    if (conn->fd >= 0) close(conn->fd);
    conn->fd = -1;
    conn->endpoint[0] = '\0';
}

static int conn_to(struct mte_conn *conn, const char *endpoint) {
    if (conn->fd >= 0 && strcmp(conn->endpoint, endpoint) == 0) return 0;
    mte_conn_close(conn);
    if (strlen(endpoint) > MTE_MAX_ENDPOINT) return -1;
    conn->fd = dial(endpoint);
    if (conn->fd < 0) return -1;
    strcpy(conn->endpoint, endpoint);
    return 0;
}

/* The exchange after the header; a transfer_status value, or -1 if the connection broke. */
static int exchange(int fd, int opcode, void *source, uint64_t length) {
    unsigned char status;
    if (recv_all(fd, &status, 1) != 0) return -1;
    if (status == MTE_OUT_OF_RANGE || status == MTE_BAD_REQUEST) return STATUS_INVALID;
    if (status != MTE_OK) return STATUS_FAILED;
    if (opcode == OPCODE_READ) return recv_all(fd, source, length) == 0 ? STATUS_COMPLETED : -1;
    if (send_all(fd, source, length) != 0 || recv_all(fd, &status, 1) != 0) return -1;
    if (status == MTE_OUT_OF_RANGE) return STATUS_INVALID;
    return status == MTE_OK ? STATUS_COMPLETED : STATUS_FAILED;
}

int mte_remote_transfer(struct mte_conn *conn, const char *endpoint, const char *name,
                        int opcode, uint64_t offset, void *source, uint64_t length) {
    size_t name_len = strlen(name);
    unsigned char header[HEADER_LEN + MTE_MAX_NAME];
    if (name_len == 0 || name_len > MTE_MAX_NAME) return STATUS_INVALID;
    put_u32(header, MTE_MAGIC);
    header[4] = (unsigned char)opcode;
    header[5] = 0;
    put_u16(header + 6, (uint16_t)name_len);
    put_u64(header + 8, offset);
    put_u64(header + 16, length);
    memcpy(header + HEADER_LEN, name, name_len);
    /* A pooled connection the server closed (idle timeout) fails at once: dial afresh once. */
    for (int attempt = 0; attempt < 2; attempt++) {
        if (conn_to(conn, endpoint) != 0) return STATUS_FAILED;
        int status = -1;
        if (send_all(conn->fd, header, HEADER_LEN + name_len) == 0)
            status = exchange(conn->fd, opcode, source, length);
        if (status >= 0) return status;
        mte_conn_close(conn); /* a retried write writes the same bytes again: harmless */
    }
    return STATUS_FAILED;
}
