/* The C ABI (client/include/kvtier/kvtier.h) against a real kvtierd, compiled as C99: the test
 * spawns the daemon itself (path from argv[1], else KVTIERD_PATH) on a temporary state directory
 * and socket, with kv_events on, and a KV-events subscriber, `kvtierctl watch --format=vllm` (path
 * from argv[2], else KVTIERCTL_PATH), then drives layouts, hashes, a shared-memory pool and a
 * raw-codec engine through offload / lookup / onboard (pages compared byte for byte), offload with
 * token ids (kvtier_v2.h: the subscriber sees them in the blocks' BlockStored events; too many
 * for a page is INVALID_ARGUMENT naming the item), park / resume / release, stats, event watches
 * (live and from a snapshot) and the error paths, and stops the daemon with SIGTERM (exit status
 * 0). Exits non-zero on the first failed check, printing the daemon's log. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvtier/kvtier.h"
#include "kvtier/kvtier_v2.h"

extern char** environ;

#define SLOTS 32
#define PAGES 8
#define TOKENS_PER_PAGE 16
#define PAGE_BYTES (2u * 2u * 2u * TOKENS_PER_PAGE * 64u * 2u) /* 2 layers x K,V x 2 heads */

static char g_dir[256];
static char g_log[512];
static char g_events[512]; /* the subscriber's output: one JSON line per KV event */
static pid_t g_daemon = 0;
static pid_t g_subscriber = 0;

static void PrintLog(void) {
  FILE* f = fopen(g_log, "r");
  char buf[4096];
  size_t n;
  if (f == NULL) return;
  fprintf(stderr, "---- kvtierd log ----\n");
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) fwrite(buf, 1, n, stderr);
  fclose(f);
}

static void Cleanup(void) {
  char cmd[512];
  if (g_subscriber > 0) {
    kill(g_subscriber, SIGKILL);
    waitpid(g_subscriber, NULL, 0);
    g_subscriber = 0;
  }
  if (g_daemon > 0) {
    kill(g_daemon, SIGKILL);
    waitpid(g_daemon, NULL, 0);
    g_daemon = 0;
  }
  if (g_dir[0] != '\0') {
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  }
}

static void Fail(const char* file, int line, const char* what, const kvtier_error* err) {
  fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
  if (err != NULL) {
    fprintf(stderr, "  status %d (%s): %s\n", err->code, kvtier_status_name(err->code),
            err->message);
  }
  PrintLog();
  Cleanup();
  exit(1);
}

/* CHECK(cond): a plain condition. CHECK_OK(call): a kvtier call that must return KVTIER_OK (its
 * message is printed otherwise); it uses the `err` in scope. */
#define CHECK(cond)                                     \
  do {                                                  \
    if (!(cond)) Fail(__FILE__, __LINE__, #cond, NULL); \
  } while (0)
#define CHECK_OK(call)                                                     \
  do {                                                                     \
    if ((call) != KVTIER_OK) Fail(__FILE__, __LINE__, #call, &err);        \
    if (err.code != KVTIER_OK) Fail(__FILE__, __LINE__, "err.code", &err); \
  } while (0)

static void SleepMs(long ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (ms % 1000) * 1000000L;
  nanosleep(&ts, NULL);
}

static void StartDaemon(const char* kvtierd, const char* socket_path, const char* endpoint) {
  char state[1024], sock[1024], allowed[1024], kv_endpoint[1024];
  char* argv[16];
  int argc = 0;
  posix_spawn_file_actions_t actions;
  int i;
  snprintf(state, sizeof(state), "--state-dir=%s/state", g_dir);
  snprintf(sock, sizeof(sock), "--socket=%s", socket_path);
  snprintf(allowed, sizeof(allowed), "--set=pools.allowed_dirs=[%s]", g_dir);
  snprintf(kv_endpoint, sizeof(kv_endpoint), "--set=kv_events.endpoint=\"%s\"", endpoint);
  argv[argc++] = (char*)kvtierd;
  argv[argc++] = state;
  argv[argc++] = sock;
  argv[argc++] = (char*)"--set=host.capacity=64MiB";
  argv[argc++] = (char*)"--set=host.chunk=4MiB";
  argv[argc++] = (char*)"--set=host.pin=none";
  argv[argc++] = (char*)"--set=disk.capacity=64MiB";
  argv[argc++] = (char*)"--set=disk.chunk=4MiB";
  argv[argc++] = allowed;
  argv[argc++] = (char*)"--set=metrics.listen=\"\""; /* no HTTP listener: no port to pick */
  argv[argc++] = (char*)"--set=server.workers=4";
  argv[argc++] = (char*)"--set=kv_events.enabled=true";
  argv[argc++] = kv_endpoint;
  argv[argc] = NULL;

  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, g_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, g_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  CHECK(posix_spawn(&g_daemon, kvtierd, &actions, NULL, argv, environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  for (i = 0; i < 3000 && access(socket_path, F_OK) != 0; ++i) {
    int status = 0;
    if (waitpid(g_daemon, &status, WNOHANG) == g_daemon) {
      g_daemon = 0;
      Fail(__FILE__, __LINE__, "kvtierd exited at start", NULL);
    }
    SleepMs(10);
  }
  CHECK(access(socket_path, F_OK) == 0);
}

/* `kvtierctl watch --format=vllm --endpoint=<endpoint>`, its stdout to g_events. */
static void StartSubscriber(const char* kvtierctl, const char* endpoint) {
  char flag[1024];
  char* argv[5];
  posix_spawn_file_actions_t actions;
  snprintf(flag, sizeof(flag), "--endpoint=%s", endpoint);
  argv[0] = (char*)kvtierctl;
  argv[1] = (char*)"watch";
  argv[2] = (char*)"--format=vllm";
  argv[3] = flag;
  argv[4] = NULL;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, g_events, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, g_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  CHECK(posix_spawn(&g_subscriber, kvtierctl, &actions, NULL, argv, environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
}

/* Whether one line of the subscriber's output holds both `a` and `b`. */
static int EventLineHas(const char* a, const char* b) {
  FILE* f = fopen(g_events, "r");
  char line[16384];
  int found = 0;
  if (f == NULL) return 0;
  while (!found && fgets(line, sizeof(line), f) != NULL) {
    found = strstr(line, a) != NULL && strstr(line, b) != NULL;
  }
  fclose(f);
  return found;
}

/* Waits up to 10 s for such a line. */
static int WaitEventLine(const char* a, const char* b) {
  int i;
  for (i = 0; i < 1000; ++i) {
    if (EventLineHas(a, b)) return 1;
    SleepMs(10);
  }
  return 0;
}

/* A 32-byte block hash as KV events carry it: its last 8 bytes read big-endian. */
static unsigned long long ReducedHash(const uint8_t* hash) {
  unsigned long long v = 0;
  int i;
  for (i = 24; i < 32; ++i) v = (v << 8) | hash[i];
  return v;
}

/* Deterministic finite BF16 values (magnitudes in [0.5, 2)) for page `page` of chain `seed`. */
static void FillPage(uint8_t* page, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 12345u;
  size_t i;
  for (i = 0; i < PAGE_BYTES; i += 2) {
    uint16_t bits;
    x = x * 1664525u + 1013904223u;
    bits = (uint16_t)(((x >> 16) & 0x807Fu) | 0x3F00u);
    page[i] = (uint8_t)(bits & 0xFF);
    page[i + 1] = (uint8_t)(bits >> 8);
  }
}

/* What an event watch saw (its callbacks run on the watch's thread). */
typedef struct WatchSeen {
  pthread_mutex_t mu;
  const uint8_t* hashes; /* the PAGES hashes the test offloads */
  unsigned stored_mask;  /* bit i: hash i arrived in a BLOCK_STORED event */
  int snapshot_complete;
  uint64_t snapshot_blocks;
  uint64_t namespace_id; /* of the last BLOCK_STORED event */
  int done;              /* on_done ran; its status in done_code */
  int done_code;
} WatchSeen;

static void OnEvent(const kvtier_event* e, void* user_data) {
  WatchSeen* seen = (WatchSeen*)user_data;
  size_t i, j;
  pthread_mutex_lock(&seen->mu);
  if (e->kind == KVTIER_EVENT_BLOCK_STORED) {
    seen->namespace_id = e->namespace_id;
    for (i = 0; i < e->num_hashes; ++i) {
      for (j = 0; j < PAGES; ++j) {
        if (memcmp(e->block_hashes + i * KVTIER_BLOCK_HASH_BYTES,
                   seen->hashes + j * KVTIER_BLOCK_HASH_BYTES, KVTIER_BLOCK_HASH_BYTES) == 0) {
          seen->stored_mask |= 1u << j;
        }
      }
    }
  } else if (e->kind == KVTIER_EVENT_SNAPSHOT_COMPLETE) {
    seen->snapshot_complete = 1;
    seen->snapshot_blocks = e->count;
  }
  pthread_mutex_unlock(&seen->mu);
}

static void OnDone(const kvtier_error* status, void* user_data) {
  WatchSeen* seen = (WatchSeen*)user_data;
  pthread_mutex_lock(&seen->mu);
  seen->done = 1;
  seen->done_code = status->code;
  pthread_mutex_unlock(&seen->mu);
}

/* Waits up to 10 s until every offloaded hash was seen (and, with `snapshot`, the snapshot ended). */
static int WaitSeen(WatchSeen* seen, int snapshot) {
  int i, ok = 0;
  for (i = 0; i < 1000 && !ok; ++i) {
    pthread_mutex_lock(&seen->mu);
    ok = seen->stored_mask == (1u << PAGES) - 1 && (!snapshot || seen->snapshot_complete);
    pthread_mutex_unlock(&seen->mu);
    if (!ok) SleepMs(10);
  }
  return ok;
}

int main(int argc, char** argv) {
  const char* kvtierd = argc > 1 ? argv[1] : KVTIERD_PATH;
  const char* kvtierctl = argc > 2 ? argv[2] : KVTIERCTL_PATH;
  char socket_path[512], pool_path[512], engine_id[KVTIER_ENGINE_ID_BYTES], name[64];
  char endpoint[600];
  char* json;
  size_t json_bytes = 0, num_pools = 0, count = 0, i, name_bytes = 0;
  kvtier_error err;
  kvtier_client* client = NULL;
  kvtier_layout *layout = NULL, *copy = NULL, *preset = NULL;
  kvtier_hasher* hasher = NULL;
  kvtier_shm_pool* pool = NULL;
  kvtier_server_info server;
  kvtier_engine_options options;
  kvtier_engine_info info;
  kvtier_offload_options offload_options;
  kvtier_park_options park_options;
  kvtier_park_result parked;
  kvtier_resume_result resumed;
  kvtier_stats stats;
  uint8_t root[KVTIER_BLOCK_HASH_BYTES], hashes[PAGES * KVTIER_BLOCK_HASH_BYTES];
  uint8_t bad_hash[KVTIER_BLOCK_HASH_BYTES], user_data[64];
  uint32_t tokens[PAGES * TOKENS_PER_PAGE + 5], indices[PAGES], targets[PAGES];
  uint32_t tokens_per_page = 0, hits = 0, stored = 0, onboarded = 0, out_of_range = SLOTS + 8;
  uint64_t hot_page_bytes = 0, slot_bytes = 0, pool_bytes = 0, freed = 0;
  int codes[PAGES], tiers[PAGES], status, exit_status = -1;
  uint8_t* base = NULL;
  const char* release_ids[2] = {"req-1", "no-such-request"};
  const char* secret = "tool call #1: weather(Paris)";

  snprintf(g_dir, sizeof(g_dir), "/tmp/kvtier-c-api-XXXXXX");
  if (mkdtemp(g_dir) == NULL) {
    g_dir[0] = '\0';
    perror("mkdtemp");
    return 1;
  }
  snprintf(g_log, sizeof(g_log), "%s/kvtierd.log", g_dir);
  snprintf(socket_path, sizeof(socket_path), "%s/kvtier.sock", g_dir);
  snprintf(pool_path, sizeof(pool_path), "%s/c-engine.kv", g_dir);
  snprintf(g_events, sizeof(g_events), "%s/kv-events.jsonl", g_dir);
  snprintf(endpoint, sizeof(endpoint), "ipc://%s/kv-events.ipc", g_dir);
  memset(&err, 0, sizeof(err));

  /* The headers' version macros (kvtier/version.h, through kvtier.h) and the loaded library's
   * version agree, and the macros agree with each other. */
  {
    char parts[32];
    snprintf(parts, sizeof(parts), "%d.%d.%d", KVTIER_VERSION_MAJOR, KVTIER_VERSION_MINOR,
             KVTIER_VERSION_PATCH);
    CHECK(strcmp(parts, KVTIER_VERSION_STRING) == 0);
    CHECK(strcmp(kvtier_version(), KVTIER_VERSION_STRING) == 0);
    CHECK(KVTIER_VERSION_AT_LEAST(0, 0, 1));
    CHECK(KVTIER_VERSION_AT_LEAST(KVTIER_VERSION_MAJOR, KVTIER_VERSION_MINOR, KVTIER_VERSION_PATCH));
    CHECK(!KVTIER_VERSION_AT_LEAST(KVTIER_VERSION_MAJOR, KVTIER_VERSION_MINOR + 1, 0));
  }
  CHECK(strcmp(kvtier_status_name(KVTIER_NOT_FOUND), "NOT_FOUND") == 0);
  CHECK(strcmp(kvtier_tier_name(KVTIER_TIER_HOST), "host") == 0);
  CHECK(strcmp(kvtier_item_code_name(KVTIER_ITEM_INVALID_ARGUMENT), "invalid_argument") == 0);

  /* Layouts need no daemon. */
  CHECK_OK(kvtier_layout_gqa(2, 2, 64, TOKENS_PER_PAGE, KVTIER_DTYPE_BF16, 0, 0, &layout, &err));
  CHECK_OK(kvtier_layout_info(layout, &tokens_per_page, &hot_page_bytes, &num_pools, &err));
  CHECK(tokens_per_page == TOKENS_PER_PAGE);
  CHECK(hot_page_bytes == PAGE_BYTES);
  CHECK(num_pools == 1);
  CHECK_OK(kvtier_layout_pool(layout, 0, name, sizeof(name), &name_bytes, &slot_bytes, &err));
  CHECK(strcmp(name, "kv") == 0 && name_bytes == 3 && slot_bytes == PAGE_BYTES);
  status = kvtier_layout_pool(layout, 1, name, sizeof(name), NULL, NULL, &err);
  CHECK(status == KVTIER_OUT_OF_RANGE && err.code == KVTIER_OUT_OF_RANGE);
  CHECK_OK(kvtier_layout_to_json(layout, NULL, 0, &json_bytes, &err)); /* size query */
  CHECK(json_bytes > 1);
  json = (char*)malloc(json_bytes);
  status = kvtier_layout_to_json(layout, json, json_bytes - 1, NULL, &err);
  CHECK(status == KVTIER_RESOURCE_EXHAUSTED && json[0] == '\0');
  CHECK_OK(kvtier_layout_to_json(layout, json, json_bytes, NULL, &err));
  CHECK(strlen(json) + 1 == json_bytes);
  CHECK_OK(kvtier_layout_from_json(json, &copy, &err));
  free(json);
  CHECK_OK(kvtier_layout_info(copy, NULL, &hot_page_bytes, NULL, &err));
  CHECK(hot_page_bytes == PAGE_BYTES);
  kvtier_layout_destroy(copy);
  CHECK_OK(kvtier_layout_from_preset("qwen3-8b", 16, KVTIER_DTYPE_BF16, &preset, &err));
  CHECK_OK(kvtier_layout_info(preset, NULL, &hot_page_bytes, NULL, &err));
  CHECK(hot_page_bytes == 36u * 2u * 8u * 16u * 128u * 2u);
  kvtier_layout_destroy(preset);
  status = kvtier_layout_from_preset("no-such-model", 16, KVTIER_DTYPE_BF16, &preset, &err);
  CHECK(status == KVTIER_NOT_FOUND && preset == NULL && strstr(err.message, "qwen3-8b") != NULL);
  status = kvtier_layout_gqa(2, 0, 64, 16, KVTIER_DTYPE_BF16, 0, 0, &preset, &err);
  CHECK(status == KVTIER_INVALID_ARGUMENT && err.message[0] != '\0');
  /* NULL out-parameters are INVALID_ARGUMENT naming them, and err may be NULL. */
  status = kvtier_layout_info(NULL, NULL, NULL, NULL, &err);
  CHECK(status == KVTIER_INVALID_ARGUMENT && strstr(err.message, "layout") != NULL);
  CHECK(kvtier_layout_info(NULL, NULL, NULL, NULL, NULL) == KVTIER_INVALID_ARGUMENT);

  /* A missing daemon is UNAVAILABLE naming the socket. */
  status = kvtier_client_connect(socket_path, "c-api-test", 500, &client, &err);
  CHECK(status == KVTIER_UNAVAILABLE && client == NULL);
  CHECK(strstr(err.message, "kvtier.sock") != NULL);

  StartDaemon(kvtierd, socket_path, endpoint);
  StartSubscriber(kvtierctl, endpoint);
  CHECK_OK(kvtier_client_connect(socket_path, "c-api-test", 20000, &client, &err));
  CHECK_OK(kvtier_client_server_info(client, 0, &server, &err));
  CHECK(server.api_version >= 1);
  CHECK(server.shared_memory_pools);
  CHECK(strstr(server.codecs, "raw") != NULL);
  CHECK(server.tier_mask & (1u << KVTIER_TIER_HOST));
  CHECK_OK(kvtier_client_server_info(client, 1, &server, &err));
  CHECK(!server.draining);

  /* A raw engine on a shared-memory pool. */
  CHECK_OK(kvtier_shm_pool_create(pool_path, "kv", SLOTS, PAGE_BYTES, &pool, &err));
  CHECK_OK(kvtier_shm_pool_data(pool, &base, &pool_bytes, &err));
  CHECK(base != NULL && pool_bytes == (uint64_t)SLOTS * PAGE_BYTES);
  memset(&options, 0, sizeof(options));
  options.model = "c-model";
  options.engine_name = "c-api-test";
  options.codec = "raw";
  options.layout = layout;
  options.pools = &pool;
  options.num_pools = 1;
  memset(root, 0, sizeof(root));
  status = kvtier_client_register_engine(client, &options, engine_id, 2, root, &info, &err);
  CHECK(status == KVTIER_INVALID_ARGUMENT); /* refused before anything is registered */
  CHECK_OK(kvtier_client_register_engine(client, &options, engine_id, sizeof(engine_id), root,
                                         &info, &err));
  CHECK(engine_id[0] != '\0');
  CHECK(info.hot_page_bytes == PAGE_BYTES && strcmp(info.codec, "raw") == 0);
  for (i = 0, count = 0; i < sizeof(root); ++i) count += root[i] != 0;
  CHECK(count > 0);

  /* Hashes of 8 full pages (the 5 trailing tokens make no hash). */
  CHECK_OK(kvtier_hasher_create(root, sizeof(root), TOKENS_PER_PAGE, &hasher, &err));
  for (i = 0; i < sizeof(tokens) / sizeof(tokens[0]); ++i) tokens[i] = (uint32_t)(1000 + 7 * i);
  status = kvtier_hasher_hash(hasher, NULL, tokens, sizeof(tokens) / sizeof(tokens[0]), hashes, 3,
                              &count, &err);
  CHECK(status == KVTIER_RESOURCE_EXHAUSTED && count == PAGES);
  CHECK_OK(kvtier_hasher_hash(hasher, NULL, tokens, sizeof(tokens) / sizeof(tokens[0]), hashes,
                              PAGES, &count, &err));
  CHECK(count == PAGES);
  CHECK(memcmp(hashes, hashes + KVTIER_BLOCK_HASH_BYTES, KVTIER_BLOCK_HASH_BYTES) != 0);
  {
    /* Chaining after page 3 gives pages 4.. of the same chain. */
    uint8_t tail[4 * KVTIER_BLOCK_HASH_BYTES];
    size_t n = 0;
    CHECK_OK(kvtier_hasher_hash(hasher, hashes + 3 * KVTIER_BLOCK_HASH_BYTES,
                                tokens + 4 * TOKENS_PER_PAGE, 4 * TOKENS_PER_PAGE, tail, 4, &n,
                                &err));
    CHECK(n == 4 && memcmp(tail, hashes + 4 * KVTIER_BLOCK_HASH_BYTES, sizeof(tail)) == 0);
  }

  /* Nothing stored yet. */
  CHECK_OK(kvtier_client_lookup(client, engine_id, hashes, KVTIER_BLOCK_HASH_BYTES, PAGES, 0, &hits,
                                NULL, &err));
  CHECK(hits == 0);

  /* A live event watch on the engine's namespace sees the offload below. */
  kvtier_watch* watch = NULL;
  int snapshot_seen = 0;
  WatchSeen live;
  memset(&live, 0, sizeof(live));
  pthread_mutex_init(&live.mu, NULL);
  live.hashes = hashes;
  status = kvtier_client_watch_events(client, 0, info.namespace_id, NULL, NULL, NULL, &watch, &err);
  CHECK(status == KVTIER_INVALID_ARGUMENT && strstr(err.message, "on_event") != NULL);
  CHECK(watch == NULL);
  /* From a snapshot (empty for these hashes): its end proves the stream is open. */
  CHECK_OK(kvtier_client_watch_events(client, 1, info.namespace_id, OnEvent, OnDone, &live, &watch,
                                      &err));
  for (i = 0; i < 1000 && !snapshot_seen; ++i) {
    pthread_mutex_lock(&live.mu);
    snapshot_seen = live.snapshot_complete;
    pthread_mutex_unlock(&live.mu);
    if (!snapshot_seen) SleepMs(10);
  }
  CHECK(snapshot_seen && live.stored_mask == 0);

  /* Offload pages 0..7, look them up, onboard them into slots 16..23. */
  for (i = 0; i < PAGES; ++i) {
    indices[i] = (uint32_t)i;
    targets[i] = (uint32_t)(16 + i);
    FillPage(base + i * PAGE_BYTES, (uint32_t)i + 1);
  }
  memset(&offload_options, 0, sizeof(offload_options));
  offload_options.ack = KVTIER_ACK_STORED;
  CHECK_OK(kvtier_client_offload(client, engine_id, hashes, KVTIER_BLOCK_HASH_BYTES, indices, PAGES,
                                 &offload_options, &stored, codes, &err));
  CHECK(stored == PAGES);
  for (i = 0; i < PAGES; ++i) CHECK(codes[i] == KVTIER_ITEM_OK);
  CHECK(WaitSeen(&live, 0));
  CHECK(live.namespace_id == info.namespace_id);
  kvtier_watch_destroy(watch); /* on_done has run when it returns */
  CHECK(live.done && live.done_code == KVTIER_CANCELLED);
  {
    /* A snapshot watch of every namespace: the stored blocks, then SNAPSHOT_COMPLETE. */
    WatchSeen snap;
    memset(&snap, 0, sizeof(snap));
    pthread_mutex_init(&snap.mu, NULL);
    snap.hashes = hashes;
    CHECK_OK(kvtier_client_watch_events(client, 1, 0, OnEvent, NULL, &snap, &watch, &err));
    CHECK(WaitSeen(&snap, 1));
    CHECK(snap.snapshot_blocks >= PAGES);
    kvtier_watch_destroy(watch);
    kvtier_watch_destroy(NULL);
    pthread_mutex_destroy(&snap.mu);
  }
  pthread_mutex_destroy(&live.mu);
  CHECK_OK(kvtier_client_lookup(client, engine_id, hashes, KVTIER_BLOCK_HASH_BYTES, PAGES, 0, &hits,
                                tiers, &err));
  CHECK(hits == PAGES);
  for (i = 0; i < PAGES; ++i) CHECK(tiers[i] == KVTIER_TIER_HOST || tiers[i] == KVTIER_TIER_DISK);
  CHECK_OK(kvtier_client_onboard(client, engine_id, hashes, KVTIER_BLOCK_HASH_BYTES, targets, PAGES,
                                 0, &onboarded, codes, tiers, &err));
  CHECK(onboarded == PAGES);
  for (i = 0; i < PAGES; ++i) {
    CHECK(codes[i] == KVTIER_ITEM_OK);
    CHECK(tiers[i] != KVTIER_TIER_UNSPECIFIED);
    CHECK(memcmp(base + i * PAGE_BYTES, base + (16 + i) * PAGE_BYTES, PAGE_BYTES) == 0);
  }

  /* A page index past the pool is the item's INVALID_ARGUMENT; the call itself succeeds. */
  memset(bad_hash, 0xAB, sizeof(bad_hash));
  CHECK_OK(kvtier_client_offload(client, engine_id, bad_hash, sizeof(bad_hash), &out_of_range, 1,
                                 NULL, &stored, codes, &err));
  CHECK(stored == 0 && codes[0] == KVTIER_ITEM_INVALID_ARGUMENT);
  /* A miss ends the onboard: the later items are SKIPPED. */
  {
    uint8_t two[2 * KVTIER_BLOCK_HASH_BYTES];
    memcpy(two, bad_hash, KVTIER_BLOCK_HASH_BYTES);
    memcpy(two + KVTIER_BLOCK_HASH_BYTES, hashes, KVTIER_BLOCK_HASH_BYTES);
    CHECK_OK(kvtier_client_onboard(client, engine_id, two, KVTIER_BLOCK_HASH_BYTES, targets, 2, 0,
                                   &onboarded, codes, NULL, &err));
    CHECK(onboarded == 0 && codes[0] == KVTIER_ITEM_NOT_FOUND && codes[1] == KVTIER_ITEM_SKIPPED);
  }
  /* An unknown engine is NOT_FOUND with the server's message. */
  status = kvtier_client_lookup(client, "e-no-such-engine", hashes, KVTIER_BLOCK_HASH_BYTES, PAGES,
                                0, &hits, NULL, &err);
  CHECK(status == KVTIER_NOT_FOUND && err.code == KVTIER_NOT_FOUND);
  CHECK(strstr(err.message, "e-no-such-engine") != NULL);
  CHECK(strstr(err.message, "not registered") != NULL);
  /* A hash longer than 32 bytes is rejected before any RPC. */
  status = kvtier_client_lookup(client, engine_id, hashes, 33, 1, 0, &hits, NULL, &err);
  CHECK(status == KVTIER_INVALID_ARGUMENT && strstr(err.message, "hash_len") != NULL);

  /* Offload with token ids (kvtier_client_offload_tokens): the subscriber of the daemon's KV
   * events sees each page's tokens in its block's BlockStored event. */
  {
    uint32_t page_tokens[PAGES * TOKENS_PER_PAGE], counts[PAGES], probe_token = 9;
    uint32_t one = 1, two_counts[2] = {TOKENS_PER_PAGE, TOKENS_PER_PAGE + 1};
    uint8_t chain[PAGES * KVTIER_BLOCK_HASH_BYTES], probe[KVTIER_BLOCK_HASH_BYTES];
    char key[64], run[256];
    size_t n = 0, used = 0;
    kvtier_transfer_result moved;
    kvtier_item items[PAGES];
    struct stat st;
    int subscribed = 0;
    /* The subscriber receives only what is published after its subscription reached the
     * daemon: offload single probe pages until it has received one. */
    for (i = 0; i < 500 && !subscribed; ++i) {
      memset(probe, 0x5A, sizeof(probe));
      probe[0] = (uint8_t)i;
      probe[1] = (uint8_t)(i >> 8);
      CHECK_OK(kvtier_client_offload_tokens(client, engine_id, probe, sizeof(probe), indices, 1,
                                            &probe_token, &one, &offload_options, NULL, NULL,
                                            &err));
      subscribed = stat(g_events, &st) == 0 && st.st_size > 0;
      if (!subscribed) SleepMs(20);
    }
    CHECK(subscribed);

    /* A chain of 8 pages hashed from its tokens 5000.., sent with them; the last page without. */
    for (i = 0; i < PAGES * TOKENS_PER_PAGE; ++i) page_tokens[i] = (uint32_t)(5000 + i);
    CHECK_OK(kvtier_hasher_hash(hasher, NULL, page_tokens, PAGES * TOKENS_PER_PAGE, chain, PAGES,
                                &n, &err));
    CHECK(n == PAGES);
    for (i = 0; i < PAGES; ++i) counts[i] = i + 1 < PAGES ? TOKENS_PER_PAGE : 0;
    CHECK_OK(kvtier_client_offload_tokens(client, engine_id, chain, KVTIER_BLOCK_HASH_BYTES,
                                          indices, PAGES, page_tokens, counts, &offload_options,
                                          &moved, items, &err));
    CHECK(moved.pages == PAGES);
    for (i = 0; i < PAGES; ++i) CHECK(items[i].code == KVTIER_ITEM_OK);
    /* Page 0's event starts with its hash, and its token_ids with page 0's 16 tokens. */
    snprintf(key, sizeof(key), "\"block_hashes\":[%llu", ReducedHash(chain));
    used = (size_t)snprintf(run, sizeof(run), "\"token_ids\":[5000");
    for (i = 1; i < TOKENS_PER_PAGE; ++i) {
      used += (size_t)snprintf(run + used, sizeof(run) - used, ",%u", (unsigned)(5000 + i));
    }
    CHECK(WaitEventLine(key, run));
    CHECK(WaitEventLine(key, "\"type\":\"BlockStored\""));
    CHECK(WaitEventLine(key, "\"block_size\":16"));
    /* Page 6's tokens in the same event; page 7 (no tokens) in one of its own, with none. */
    snprintf(run, sizeof(run), "%u,%u]", (unsigned)(5000 + 7 * TOKENS_PER_PAGE - 2),
             (unsigned)(5000 + 7 * TOKENS_PER_PAGE - 1));
    CHECK(WaitEventLine(key, run));
    snprintf(key, sizeof(key), "\"block_hashes\":[%llu]",
             ReducedHash(chain + (PAGES - 1) * KVTIER_BLOCK_HASH_BYTES));
    CHECK(WaitEventLine(key, "\"token_ids\":[]"));

    /* 17 tokens for a page of 16 fail the call, naming the item; nothing of it is stored. */
    memset(probe, 0x6B, sizeof(probe));
    memcpy(chain, probe, sizeof(probe));
    probe[0] = 1;
    memcpy(chain + KVTIER_BLOCK_HASH_BYTES, probe, sizeof(probe));
    status = kvtier_client_offload_tokens(client, engine_id, chain, KVTIER_BLOCK_HASH_BYTES,
                                          indices, 2, page_tokens, two_counts, &offload_options,
                                          &moved, items, &err);
    CHECK(status == KVTIER_INVALID_ARGUMENT && err.code == KVTIER_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "items[1]: 17 token ids") != NULL);
    CHECK(strstr(err.message, "tokens_per_page") != NULL);
    CHECK(moved.pages == 0);
    CHECK_OK(kvtier_client_lookup(client, engine_id, chain, KVTIER_BLOCK_HASH_BYTES, 1, 0, &hits,
                                  NULL, &err));
    CHECK(hits == 0);
    /* Counts without tokens are refused before any RPC. */
    status = kvtier_client_offload_tokens(client, engine_id, chain, KVTIER_BLOCK_HASH_BYTES,
                                          indices, 2, NULL, two_counts, NULL, NULL, NULL, &err);
    CHECK(status == KVTIER_INVALID_ARGUMENT && strstr(err.message, "token_ids") != NULL);
    /* No counts: no tokens (kvtier_client_offload_v2). */
    CHECK_OK(kvtier_client_offload_tokens(client, engine_id, chain, KVTIER_BLOCK_HASH_BYTES,
                                          indices, 1, NULL, NULL, &offload_options, &moved, items,
                                          &err));
    CHECK(moved.pages == 1 && items[0].code == KVTIER_ITEM_OK);
    snprintf(key, sizeof(key), "\"block_hashes\":[%llu]", ReducedHash(chain));
    CHECK(WaitEventLine(key, "\"token_ids\":[]"));
  }

  /* Park pages 0..3 with user data; resume them into 24..27. */
  memset(&park_options, 0, sizeof(park_options));
  park_options.num_tokens = 4 * TOKENS_PER_PAGE - 3;
  park_options.user_data = (const uint8_t*)secret;
  park_options.user_data_len = strlen(secret);
  park_options.ack = KVTIER_ACK_STORED;
  CHECK_OK(
      kvtier_client_park(client, engine_id, "req-1", indices, 4, &park_options, &parked, &err));
  CHECK(parked.parked_pages == 4 && parked.expires_at_unix_ms > 0);
  {
    uint32_t resume_into[4] = {24, 25, 26, 27}, again[4] = {28, 29, 30, 31};
    memset(base + 24 * PAGE_BYTES, 0, 8 * PAGE_BYTES);
    memset(user_data, 0, sizeof(user_data));
    CHECK_OK(kvtier_client_resume(client, engine_id, "req-1", resume_into, 4, 0, 1, user_data,
                                  sizeof(user_data), &resumed, &err));
    CHECK(resumed.resumed_pages == 4 && resumed.parked_pages == 4);
    CHECK(resumed.num_tokens == 4 * TOKENS_PER_PAGE - 3 && !resumed.released);
    CHECK(resumed.user_data_len == strlen(secret));
    CHECK(memcmp(user_data, secret, strlen(secret)) == 0);
    for (i = 0; i < 4; ++i) {
      CHECK(memcmp(base + i * PAGE_BYTES, base + (24 + i) * PAGE_BYTES, PAGE_BYTES) == 0);
    }
    /* A user_data buffer that is too small gets the first bytes and the full length. */
    memset(user_data, 0, sizeof(user_data));
    CHECK_OK(kvtier_client_resume(client, engine_id, "req-1", again, 4, 0, 1, user_data, 4,
                                  &resumed, &err));
    CHECK(resumed.user_data_len == strlen(secret) && memcmp(user_data, secret, 4) == 0);
    CHECK(user_data[4] == 0);
    CHECK(memcmp(base + 3 * PAGE_BYTES, base + 31 * PAGE_BYTES, PAGE_BYTES) == 0);
  }
  CHECK_OK(kvtier_client_release(client, engine_id, release_ids, 2, codes, &freed, &err));
  CHECK(codes[0] == KVTIER_ITEM_OK && codes[1] == KVTIER_ITEM_NOT_FOUND);
  status =
      kvtier_client_resume(client, engine_id, "req-1", indices, 4, 0, 0, NULL, 0, &resumed, &err);
  CHECK(status == KVTIER_NOT_FOUND && err.message[0] != '\0');

  /* Pin and unpin the stored blocks. */
  CHECK_OK(
      kvtier_client_pin(client, engine_id, hashes, KVTIER_BLOCK_HASH_BYTES, 2, 5000, codes, &err));
  CHECK(codes[0] == KVTIER_ITEM_OK && codes[1] == KVTIER_ITEM_OK);
  CHECK_OK(kvtier_client_unpin(client, engine_id, hashes, KVTIER_BLOCK_HASH_BYTES, 2, codes, &err));

  /* The counters saw the traffic. */
  CHECK_OK(kvtier_client_stats(client, &stats, &err));
  CHECK(stats.hot_bytes_offloaded >= (uint64_t)PAGES * PAGE_BYTES);
  CHECK(stats.hot_bytes_onboarded >= (uint64_t)PAGES * PAGE_BYTES);
  CHECK(stats.registered_engines >= 1);
  CHECK(stats.num_tiers >= 1);
  {
    uint64_t blocks = 0;
    for (i = 0; i < stats.num_tiers; ++i) {
      if (stats.tiers[i].tier == KVTIER_TIER_HOST) blocks = stats.tiers[i].blocks;
    }
    CHECK(blocks >= PAGES);
  }

  /* Two engines registered (the id that did not fit, and this one); unregister this one. */
  CHECK_OK(kvtier_client_unregister(client, engine_id, &err));
  status = kvtier_client_lookup(client, engine_id, hashes, KVTIER_BLOCK_HASH_BYTES, 1, 0, &hits,
                                NULL, &err);
  CHECK(status == KVTIER_NOT_FOUND);

  kvtier_hasher_destroy(hasher);
  kvtier_client_close(client);
  kvtier_shm_pool_destroy(pool);
  kvtier_layout_destroy(layout);
  CHECK(access(pool_path, F_OK) != 0); /* destroy removed the file */

  kill(g_subscriber, SIGTERM);
  CHECK(waitpid(g_subscriber, &exit_status, 0) == g_subscriber);
  g_subscriber = 0;
  CHECK(WIFEXITED(exit_status) && WEXITSTATUS(exit_status) == 0);
  kill(g_daemon, SIGTERM);
  CHECK(waitpid(g_daemon, &exit_status, 0) == g_daemon);
  g_daemon = 0;
  if (!WIFEXITED(exit_status) || WEXITSTATUS(exit_status) != 0) {
    Fail(__FILE__, __LINE__, "kvtierd exited with status 0 after SIGTERM", NULL);
  }
  Cleanup();
  printf("c_api_test: OK\n");
  return 0;
}
