/* A fake libcuda.so.1 for the tests: the driver entry points ember.cuda_runtime calls, on host memory.
 *
 * "Device" memory is malloc'd; copies are memcpy after checking that each range lies inside a known allocation of
 * the right kind (device or pinned host), so swapped or mis-sized arguments are caught. Kernels are looked up by
 * name in the loaded cubin's bytes; launches of the kernels below are executed on the host from the kernelParams
 * array (so the argument packing is checked by the results), every other launch is only recorded.
 * Each call is appended to $FAKE_CUDA_LOG as one line; a broken contract is logged as "VIOLATION ..." and returns
 * CUDA_ERROR_INVALID_VALUE. Settings (read by cuInit): FAKE_CUDA_DEVICES (default 1), FAKE_CUDA_CC (default 90),
 * FAKE_CUDA_HANG=1 (streams and recorded events never complete), FAKE_CUDA_INIT_ERROR (cuInit's result).
 *
 * The parameter layout (cuFuncGetParamInfo, and how many bytes a launch reads behind each kernelParams pointer) is
 * the cubin's own, from its .nv.info.<kernel> section.
 * Graphs (cuGraphCreate ... cuGraphLaunch) keep their own copies of the argument values, as a real driver does; the
 * library built with -DFAKE_CUDA_NO_GRAPHS has none of the graph entry points. A launch or kernel node with more
 * than 48 KiB of dynamic shared memory needs the kernel's cuFuncSetAttribute(8) first.
 * Kernels executed: add(float *out, const float *a, const float *b, int n): out[i] = a[i] + b[i];
 *                   iota64(long long *out, long long start): out[i] = start + i (i < grid * block).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
#define OK 0
#define INVALID_VALUE 1
#define NOT_INITIALIZED 3
#define INVALID_DEVICE 101
#define INVALID_IMAGE 200
#define INVALID_CONTEXT 201
#define INVALID_HANDLE 400
#define NOT_FOUND 500
#define NOT_READY 600
#define NOT_SUPPORTED 801

static FILE *logf_;
static int initialized, ndevices = 1, cc = 90, hang;
static double clock_ms;  /* the fake GPU's time: each launch takes 1.5 ms */

static void logline(const char *fmt, ...) {
  if (!logf_) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(logf_, fmt, ap);
  va_end(ap);
  fputc('\n', logf_);
  fflush(logf_);
}
#define VIOLATION(...) do { logline("VIOLATION " __VA_ARGS__); return INVALID_VALUE; } while (0)
#define NEED_INIT() do { if (!initialized) return NOT_INITIALIZED; } while (0)

/* *** objects *** */
enum { DEVICE_MEM = 1, HOST_MEM = 2 };
typedef struct { uintptr_t ptr; size_t size; int kind; } alloc_t;
static alloc_t allocs[4096];
static int nallocs;

static alloc_t *find_alloc(uintptr_t ptr, size_t n, int kind) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].kind == kind && ptr >= allocs[i].ptr && ptr + n <= allocs[i].ptr + allocs[i].size) return &allocs[i];
  return NULL;
}

typedef struct { int device; int retained; } ctx_t;
static ctx_t contexts[8];
typedef struct { int live; } stream_t;
static stream_t streams[64];
typedef struct { int live, recorded, flags; double t; } event_t;
static event_t events[4096];
typedef struct { int live; unsigned char *image; size_t size; } module_t;
static module_t modules[256];
typedef struct { int module; char name[128]; int nparams; size_t sizes[64], offsets[64]; int max_dynamic_shared; } function_t;
static function_t functions[1024];
static int nstreams, nevents, nmodules, nfunctions;

#define CHECK_HANDLE(table, n, h, what) \
  ((uintptr_t)(h) >= (uintptr_t)(table) && (uintptr_t)(h) < (uintptr_t)((table) + (n)))
static int valid_ctx(void *c) { return CHECK_HANDLE(contexts, 8, c, "ctx") && ((ctx_t *)c)->retained > 0; }
static int valid_stream(void *s) { return CHECK_HANDLE(streams, nstreams, s, "stream") && ((stream_t *)s)->live; }
static int valid_event(void *e) { return CHECK_HANDLE(events, nevents, e, "event") && ((event_t *)e)->live; }
static int valid_function(void *f) { return CHECK_HANDLE(functions, nfunctions, f, "function"); }
static void *current;
static int read_params(const module_t *m, const char *name, function_t *fn);

/* *** init, errors, devices *** */
CUresult cuInit(unsigned int flags) {
  const char *p;
  if ((p = getenv("FAKE_CUDA_LOG")) && *p && !logf_) logf_ = fopen(p, "a");
  if ((p = getenv("FAKE_CUDA_DEVICES")) && *p) ndevices = atoi(p);
  if ((p = getenv("FAKE_CUDA_CC")) && *p) cc = atoi(p);
  hang = (p = getenv("FAKE_CUDA_HANG")) && *p == '1';
  logline("cuInit flags=%u", flags);
  if (flags != 0) VIOLATION("cuInit: flags must be 0, got %u", flags);
  if ((p = getenv("FAKE_CUDA_INIT_ERROR")) && *p) return atoi(p);
  initialized = 1;
  return OK;
}

CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }

static const char *error_name(CUresult e) {
  switch (e) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 200: return "CUDA_ERROR_INVALID_IMAGE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 600: return "CUDA_ERROR_NOT_READY";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    default: return NULL;
  }
}
CUresult cuGetErrorName(CUresult e, const char **s) {
  if (!(*s = error_name(e))) return INVALID_VALUE;
  return OK;
}
CUresult cuGetErrorString(CUresult e, const char **s) {
  if (!error_name(e)) return INVALID_VALUE;
  *s = e == 100 ? "no CUDA-capable device is detected" : e == 500 ? "named symbol not found" : "fake driver error";
  return OK;
}

CUresult cuDeviceGetCount(int *n) { NEED_INIT(); *n = ndevices; return OK; }
CUresult cuDeviceGet(int *d, int ordinal) {
  NEED_INIT();
  logline("cuDeviceGet ordinal=%d", ordinal);
  if (ordinal < 0 || ordinal >= ndevices) return INVALID_DEVICE;
  *d = ordinal;
  return OK;
}
CUresult cuDeviceGetName(char *name, int len, int dev) {
  NEED_INIT();
  if (len < 16 || dev < 0 || dev >= ndevices) VIOLATION("cuDeviceGetName len=%d dev=%d", len, dev);
  snprintf(name, (size_t)len, "Fake GPU %d", dev);
  return OK;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  NEED_INIT();
  if (dev < 0 || dev >= ndevices) VIOLATION("cuDeviceGetAttribute dev=%d", dev);
  switch (attr) {
    case 1: case 2: case 3: *v = 1024; break;
    case 4: *v = 64; break;
    case 5: *v = 2147483647; break;
    case 6: case 7: *v = 65535; break;
    case 16: *v = 132; break;
    case 75: *v = cc / 10; break;
    case 76: *v = cc % 10; break;
    case 97: *v = 232448; break;
    default: *v = 0;
  }
  return OK;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { NEED_INIT(); *bytes = (size_t)80 << 30; (void)dev; return OK; }
CUresult cuDeviceCanAccessPeer(int *can, int dev, int peer) {
  NEED_INIT();
  *can = dev != peer;
  return OK;
}

/* *** contexts *** */
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  NEED_INIT();
  if (dev < 0 || dev >= ndevices) VIOLATION("cuDevicePrimaryCtxRetain dev=%d", dev);
  contexts[dev].device = dev;
  contexts[dev].retained++;
  *ctx = &contexts[dev];
  logline("cuDevicePrimaryCtxRetain dev=%d", dev);
  return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  NEED_INIT();
  if (dev < 0 || dev >= ndevices || contexts[dev].retained <= 0) VIOLATION("cuDevicePrimaryCtxRelease dev=%d", dev);
  contexts[dev].retained--;
  logline("cuDevicePrimaryCtxRelease dev=%d", dev);
  return OK;
}
CUresult cuCtxSetCurrent(void *ctx) {
  NEED_INIT();
  if (ctx && !valid_ctx(ctx)) VIOLATION("cuCtxSetCurrent: unknown context %p", ctx);
  current = ctx;
  return OK;
}
#define NEED_CTX() do { NEED_INIT(); if (!current) return INVALID_CONTEXT; } while (0)
CUresult cuCtxSynchronize(void) { NEED_CTX(); return OK; }
CUresult cuCtxEnablePeerAccess(void *peer, unsigned int flags) {
  NEED_CTX();
  if (!valid_ctx(peer) || peer == current || flags) VIOLATION("cuCtxEnablePeerAccess peer=%p flags=%u", peer, flags);
  logline("cuCtxEnablePeerAccess dev=%d peer=%d", ((ctx_t *)current)->device, ((ctx_t *)peer)->device);
  return OK;
}

/* *** memory *** */
static CUresult add_alloc(void *p, size_t size, int kind) {
  if (nallocs == 4096) VIOLATION("too many allocations");
  allocs[nallocs++] = (alloc_t){(uintptr_t)p, size, kind};
  return OK;
}
static CUresult remove_alloc(uintptr_t p, int kind, const char *call) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].ptr == p && allocs[i].kind == kind) {
      free((void *)p);
      allocs[i] = allocs[--nallocs];
      logline("%s ptr=0x%lx", call, (unsigned long)p);
      return OK;
    }
  VIOLATION("%s: 0x%lx is no allocation of this kind", call, (unsigned long)p);
}
CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) { NEED_CTX(); *free_ = *total = (size_t)80 << 30; return OK; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
  NEED_CTX();
  if (size == 0) VIOLATION("cuMemAlloc_v2: size 0");
  if (size > ((size_t)1 << 40)) return 2;
  void *m = calloc(1, size);
  if (!m) return 2;
  *p = (CUdeviceptr)(uintptr_t)m;
  logline("cuMemAlloc_v2 size=%zu dev=%d", size, ((ctx_t *)current)->device);
  return add_alloc(m, size, DEVICE_MEM);
}
CUresult cuMemFree_v2(CUdeviceptr p) { NEED_CTX(); return remove_alloc((uintptr_t)p, DEVICE_MEM, "cuMemFree_v2"); }
CUresult cuMemHostAlloc(void **p, size_t size, unsigned int flags) {
  NEED_CTX();
  if (size == 0 || flags != 1) VIOLATION("cuMemHostAlloc size=%zu flags=%u", size, flags);
  *p = malloc(size);
  logline("cuMemHostAlloc size=%zu", size);
  return add_alloc(*p, size, HOST_MEM);
}
CUresult cuMemFreeHost(void *p) { NEED_CTX(); return remove_alloc((uintptr_t)p, HOST_MEM, "cuMemFreeHost"); }

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream) {
  NEED_CTX();
  if (!valid_stream(stream)) VIOLATION("cuMemcpyHtoDAsync_v2: unknown stream %p", stream);
  if (!find_alloc((uintptr_t)dst, n, DEVICE_MEM)) VIOLATION("cuMemcpyHtoDAsync_v2: dst 0x%lx+%zu", (unsigned long)dst, n);
  if (!find_alloc((uintptr_t)src, n, HOST_MEM)) VIOLATION("cuMemcpyHtoDAsync_v2: src %p+%zu not pinned", src, n);
  memcpy((void *)(uintptr_t)dst, src, n);
  logline("cuMemcpyHtoDAsync_v2 n=%zu", n);
  return OK;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream) {
  NEED_CTX();
  if (!valid_stream(stream)) VIOLATION("cuMemcpyDtoHAsync_v2: unknown stream %p", stream);
  if (!find_alloc((uintptr_t)src, n, DEVICE_MEM)) VIOLATION("cuMemcpyDtoHAsync_v2: src 0x%lx+%zu", (unsigned long)src, n);
  if (!find_alloc((uintptr_t)dst, n, HOST_MEM)) VIOLATION("cuMemcpyDtoHAsync_v2: dst %p+%zu not pinned", dst, n);
  memcpy(dst, (void *)(uintptr_t)src, n);
  logline("cuMemcpyDtoHAsync_v2 n=%zu", n);
  return OK;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *stream) {
  NEED_CTX();
  if (!valid_stream(stream) || !find_alloc((uintptr_t)dst, n, DEVICE_MEM) || !find_alloc((uintptr_t)src, n, DEVICE_MEM))
    VIOLATION("cuMemcpyDtoDAsync_v2 dst=0x%lx src=0x%lx n=%zu", (unsigned long)dst, (unsigned long)src, n);
  memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
  logline("cuMemcpyDtoDAsync_v2 n=%zu", n);
  return OK;
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void *dctx, CUdeviceptr src, void *sctx, size_t n, void *stream) {
  NEED_CTX();
  if (!valid_ctx(dctx) || !valid_ctx(sctx) || !valid_stream(stream) || !find_alloc((uintptr_t)dst, n, DEVICE_MEM) ||
      !find_alloc((uintptr_t)src, n, DEVICE_MEM))
    VIOLATION("cuMemcpyPeerAsync dst=0x%lx src=0x%lx n=%zu", (unsigned long)dst, (unsigned long)src, n);
  memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
  logline("cuMemcpyPeerAsync n=%zu dst_dev=%d src_dev=%d", n, ((ctx_t *)dctx)->device, ((ctx_t *)sctx)->device);
  return OK;
}

/* *** modules and kernels *** */
CUresult cuModuleLoadData(void **mod, const void *image) {
  NEED_CTX();
  const unsigned char *b = image;
  if (memcmp(b, "\x7f" "ELF", 4) != 0 || b[4] != 2 || b[18] + 256 * b[19] != 190) return INVALID_IMAGE;
  uint64_t shoff;
  uint16_t shentsize, shnum;
  memcpy(&shoff, b + 40, 8);
  memcpy(&shentsize, b + 58, 2);
  memcpy(&shnum, b + 60, 2);
  size_t size = shoff + (size_t)shentsize * shnum;
  if (nmodules == 256) VIOLATION("too many modules");
  module_t *m = &modules[nmodules++];
  m->live = 1;
  m->size = size;
  m->image = malloc(size);
  memcpy(m->image, b, size);
  *mod = m;
  logline("cuModuleLoadData size=%zu", size);
  return OK;
}
CUresult cuModuleUnload(void *mod) {
  NEED_CTX();
  module_t *m = mod;
  if (!CHECK_HANDLE(modules, nmodules, m, "module") || !m->live) VIOLATION("cuModuleUnload %p", mod);
  m->live = 0;
  free(m->image);
  logline("cuModuleUnload");
  return OK;
}
CUresult cuModuleGetFunction(void **f, void *mod, const char *name) {
  NEED_CTX();
  module_t *m = mod;
  if (!CHECK_HANDLE(modules, nmodules, m, "module") || !m->live) VIOLATION("cuModuleGetFunction: module %p", mod);
  size_t len = strlen(name) + 1;  /* with its NUL: the string table entry */
  int found = 0;
  for (size_t i = 0; i + len <= m->size && !found; i++) found = memcmp(m->image + i, name, len) == 0;
  logline("cuModuleGetFunction name=%s found=%d", name, found);
  if (!found) return NOT_FOUND;
  function_t *fn = &functions[nfunctions++];
  fn->module = (int)(m - modules);
  snprintf(fn->name, sizeof fn->name, "%s", name);
  if (read_params(m, name, fn) < 0) VIOLATION("cuModuleGetFunction %s: unreadable parameter table", name);
  *f = fn;
  return OK;
}
CUresult cuFuncGetAttribute(int *v, int attr, void *f) {
  NEED_INIT();
  if (!valid_function(f)) VIOLATION("cuFuncGetAttribute: function %p", f);
  *v = attr == 0 ? 1024 : 0;
  return OK;
}
#define STATIC_SHARED_MAX 49152
#define SHARED_OPTIN_MAX 232448  /* attribute 97: 227 KiB, sm_90 */
CUresult cuFuncSetAttribute(void *f, int attr, int value) {
  NEED_INIT();
  if (!valid_function(f)) VIOLATION("cuFuncSetAttribute: function %p", f);
  logline("cuFuncSetAttribute %s attr=%d value=%d", ((function_t *)f)->name, attr, value);
  if (attr == 8) {  /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    if (value < 0 || value > SHARED_OPTIN_MAX) return INVALID_VALUE;
    ((function_t *)f)->max_dynamic_shared = value;
  }
  return OK;
}
/* The kernel's parameters as the cubin lists them: section ".nv.info.<name>" holds attributes of 4 bytes, or for
 * format 4 (EIFMT_SVAL) a 16-bit size and that many bytes; EIATTR_KPARAM_INFO (0x17) is
 * {u32 index; u16 ordinal; u16 offset; u32 flags}, the size in bytes in bits 18..31 of flags. */
static int read_params(const module_t *m, const char *name, function_t *fn) {
  const unsigned char *b = m->image;
  uint64_t shoff;
  uint16_t shentsize, shnum, shstrndx;
  memcpy(&shoff, b + 40, 8);
  memcpy(&shentsize, b + 58, 2);
  memcpy(&shnum, b + 60, 2);
  memcpy(&shstrndx, b + 62, 2);
  uint64_t stroff;
  memcpy(&stroff, b + shoff + (size_t)shstrndx * shentsize + 24, 8);
  char want[160];
  snprintf(want, sizeof want, ".nv.info.%s", name);
  fn->nparams = 0;
  for (int i = 0; i < shnum; i++) {
    const unsigned char *sh = b + shoff + (size_t)i * shentsize;
    uint32_t name_off;
    uint64_t off, size;
    memcpy(&name_off, sh, 4);
    memcpy(&off, sh + 24, 8);
    memcpy(&size, sh + 32, 8);
    if (strcmp((const char *)b + stroff + name_off, want) != 0) continue;
    for (uint64_t p = off; p + 4 <= off + size;) {
      unsigned fmt = b[p], attr = b[p + 1];
      uint16_t len = 0;
      if (fmt == 4) memcpy(&len, b + p + 2, 2);
      if (fmt == 4 && attr == 0x17 && len >= 12) {
        uint16_t ordinal, offset;
        uint32_t flags;
        memcpy(&ordinal, b + p + 8, 2);
        memcpy(&offset, b + p + 10, 2);
        memcpy(&flags, b + p + 12, 4);
        if (ordinal >= 64) return -1;
        fn->sizes[ordinal] = (flags >> 18) & 0x3fff;
        fn->offsets[ordinal] = offset;
        if (ordinal + 1 > fn->nparams) fn->nparams = ordinal + 1;
      }
      p += fmt == 4 ? 4 + (uint64_t)len : 4;
    }
    return fn->nparams;
  }
  return 0;  /* no info section: a kernel without parameters */
}

CUresult cuFuncGetParamInfo(void *f, size_t index, size_t *offset, size_t *size) {
  NEED_INIT();
  if (!valid_function(f) || !offset || !size) VIOLATION("cuFuncGetParamInfo: function %p", f);
  function_t *fn = f;
  if (index >= (size_t)fn->nparams) return INVALID_VALUE;
  *offset = fn->offsets[index];
  *size = fn->sizes[index];
  return OK;
}

/* A launch's checks (dims, dynamic shared memory against the kernel's opt-in) and its arguments as text. */
static CUresult check_launch(const char *call, function_t *fn, const unsigned dims[6], unsigned shared,
                             void **params, char *args, size_t args_size) {
  if (!dims[0] || !dims[1] || !dims[2] || !dims[3] || !dims[4] || !dims[5] ||
      (unsigned long)dims[3] * dims[4] * dims[5] > 1024)
    VIOLATION("%s: grid %u,%u,%u block %u,%u,%u", call, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]);
  if (shared > STATIC_SHARED_MAX && shared > (unsigned)fn->max_dynamic_shared)
    VIOLATION("%s %s: %u bytes of dynamic shared memory, over 48 KiB without cuFuncSetAttribute(8) (set: %d)", call,
              fn->name, shared, fn->max_dynamic_shared);
  args[0] = 0;
  for (int i = 0; i < fn->nparams; i++) {
    char one[40];
    size_t size = fn->sizes[i];
    if (size != 1 && size != 2 && size != 4 && size != 8) VIOLATION("%s %s: param %d of %zu bytes", call, fn->name, i, size);
    long long v = size == 1 ? *(signed char *)params[i] : size == 2 ? *(short *)params[i]
                : size == 4 ? *(int *)params[i] : *(long long *)params[i];
    snprintf(one, sizeof one, "%s%lld", i ? "," : "", v);
    strncat(args, one, args_size - strlen(args) - 1);
  }
  return OK;
}

/* Run a launch of one of the kernels the fake executes (others are only recorded). */
static CUresult execute(function_t *fn, const unsigned dims[6], void **params) {
  size_t threads = (size_t)dims[0] * dims[1] * dims[2] * dims[3] * dims[4] * dims[5];
  if (!strcmp(fn->name, "add") && fn->nparams == 4) {
    float *out = (float *)(uintptr_t)*(uint64_t *)params[0], *a = (float *)(uintptr_t)*(uint64_t *)params[1],
          *b = (float *)(uintptr_t)*(uint64_t *)params[2];
    size_t count = (size_t)*(int *)params[3];
    if (count > threads) count = threads;
    if (!find_alloc((uintptr_t)out, count * 4, DEVICE_MEM) || !find_alloc((uintptr_t)a, count * 4, DEVICE_MEM) ||
        !find_alloc((uintptr_t)b, count * 4, DEVICE_MEM))
      VIOLATION("launch of add: a buffer is not device memory of %zu floats", count);
    for (size_t i = 0; i < count; i++) out[i] = a[i] + b[i];
  } else if (!strcmp(fn->name, "iota64") && fn->nparams == 2) {
    long long *out = (long long *)(uintptr_t)*(uint64_t *)params[0], start = *(long long *)params[1];
    if (!find_alloc((uintptr_t)out, threads * 8, DEVICE_MEM)) VIOLATION("launch of iota64: out too small");
    for (size_t i = 0; i < threads; i++) out[i] = start + (long long)i;
  }
  clock_ms += 1.5;
  return OK;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
  NEED_CTX();
  if (!valid_function(f)) VIOLATION("cuLaunchKernel: function %p", f);
  if (!valid_stream(stream)) VIOLATION("cuLaunchKernel: stream %p", stream);
  if (!params || extra) VIOLATION("cuLaunchKernel: kernelParams %p extra %p", (void *)params, (void *)extra);
  function_t *fn = f;
  unsigned dims[6] = {gx, gy, gz, bx, by, bz};
  char args[2048];
  CUresult r = check_launch("cuLaunchKernel", fn, dims, shared, params, args, sizeof args);
  if (r != OK) return r;
  logline("cuLaunchKernel %s grid=%u,%u,%u block=%u,%u,%u shared=%u args=%s", fn->name, gx, gy, gz, bx, by, bz,
          shared, args);
  return execute(fn, dims, params);
}

#ifndef FAKE_CUDA_NO_GRAPHS  /* (built without them too: a driver that lacks the graph entry points) */
/* *** graphs: kernel nodes in a chain; the driver copies each node's argument values (as a real one does), an
 * executable graph has its own copy of them, so a replay sees new arguments only through
 * cuGraphExecKernelNodeSetParams_v2. The params struct is cuda.h's CUDA_KERNEL_NODE_PARAMS_v2. *** */
typedef struct {
  void *func;
  unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  void **kernelParams, **extra;
  void *kern, *ctx;
} kernel_node_params_t;
_Static_assert(sizeof(kernel_node_params_t) == 72, "CUDA_KERNEL_NODE_PARAMS_v2 is 72 bytes");
typedef struct { function_t *fn; unsigned dims[6], shared; unsigned char values[64][8]; } node_t;
#define MAX_NODES 256
typedef struct { int live; int nnodes; node_t nodes[MAX_NODES]; } graph_t;
typedef struct { int live; graph_t *graph; int nnodes; node_t nodes[MAX_NODES]; } graph_exec_t;
static graph_t graphs[16];
static graph_exec_t graph_execs[16];
static int ngraphs, ngraph_execs;
static int valid_graph(void *g) { return CHECK_HANDLE(graphs, ngraphs, g, "graph") && ((graph_t *)g)->live; }
static int valid_graph_exec(void *e) {
  return CHECK_HANDLE(graph_execs, ngraph_execs, e, "exec") && ((graph_exec_t *)e)->live;
}
/* A node handle is the address of its node_t in its graph. */
static int node_index(graph_t *g, void *node) {
  node_t *n = node;
  return n >= g->nodes && n < g->nodes + g->nnodes ? (int)(n - g->nodes) : -1;
}

static CUresult read_node(const char *call, const kernel_node_params_t *p, node_t *out, char *args, size_t size) {
  if (!p || !valid_function(p->func)) VIOLATION("%s: func %p", call, p ? p->func : NULL);
  if (!p->kernelParams || p->extra) VIOLATION("%s: kernelParams %p extra %p", call, (void *)p->kernelParams,
                                              (void *)p->extra);
  if (p->kern) VIOLATION("%s: kern %p set beside func", call, p->kern);
  if (p->ctx && !valid_ctx(p->ctx)) VIOLATION("%s: ctx %p", call, p->ctx);
  function_t *fn = p->func;
  unsigned dims[6] = {p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ};
  CUresult r = check_launch(call, fn, dims, p->sharedMemBytes, p->kernelParams, args, size);
  if (r != OK) return r;
  out->fn = fn;
  memcpy(out->dims, dims, sizeof dims);
  out->shared = p->sharedMemBytes;
  for (int i = 0; i < fn->nparams; i++) memcpy(out->values[i], p->kernelParams[i], fn->sizes[i]);
  return OK;
}

CUresult cuGraphCreate(void **g, unsigned int flags) {
  NEED_CTX();
  if (!g || flags || ngraphs == 16) VIOLATION("cuGraphCreate flags=%u", flags);
  graphs[ngraphs] = (graph_t){1, 0, {{0}}};
  *g = &graphs[ngraphs++];
  logline("cuGraphCreate");
  return OK;
}
CUresult cuGraphAddKernelNode_v2(void **node, void *graph, void **deps, size_t ndeps,
                                 const kernel_node_params_t *p) {
  NEED_CTX();
  if (!node || !valid_graph(graph)) VIOLATION("cuGraphAddKernelNode_v2: graph %p", graph);
  graph_t *g = graph;
  if (g->nnodes == MAX_NODES) VIOLATION("cuGraphAddKernelNode_v2: too many nodes");
  if (ndeps && !deps) VIOLATION("cuGraphAddKernelNode_v2: %zu dependencies, no array", ndeps);
  /* (the fake runs nodes in the order added: each must come after the one before it) */
  if (g->nnodes && (ndeps != 1 || node_index(g, deps[0]) != g->nnodes - 1))
    VIOLATION("cuGraphAddKernelNode_v2: node %d does not depend on node %d", g->nnodes, g->nnodes - 1);
  if (!g->nnodes && ndeps) VIOLATION("cuGraphAddKernelNode_v2: the first node has %zu dependencies", ndeps);
  char args[2048];
  CUresult r = read_node("cuGraphAddKernelNode_v2", p, &g->nodes[g->nnodes], args, sizeof args);
  if (r != OK) return r;
  logline("cuGraphAddKernelNode_v2 %s node=%d deps=%zu grid=%u,%u,%u block=%u,%u,%u shared=%u args=%s",
          p->func ? ((function_t *)p->func)->name : "?", g->nnodes, ndeps, p->gridDimX, p->gridDimY, p->gridDimZ,
          p->blockDimX, p->blockDimY, p->blockDimZ, p->sharedMemBytes, args);
  *node = &g->nodes[g->nnodes++];
  return OK;
}
CUresult cuGraphInstantiateWithFlags(void **e, void *graph, unsigned long long flags) {
  NEED_CTX();
  if (!e || !valid_graph(graph) || flags || ngraph_execs == 16)
    VIOLATION("cuGraphInstantiateWithFlags graph=%p flags=%llu", graph, flags);
  graph_exec_t *x = &graph_execs[ngraph_execs++];
  x->live = 1;
  x->graph = graph;
  x->nnodes = x->graph->nnodes;
  memcpy(x->nodes, x->graph->nodes, sizeof x->nodes);
  *e = x;
  logline("cuGraphInstantiateWithFlags nodes=%d", x->nnodes);
  return OK;
}
CUresult cuGraphExecKernelNodeSetParams_v2(void *e, void *node, const kernel_node_params_t *p) {
  NEED_CTX();
  if (!valid_graph_exec(e)) VIOLATION("cuGraphExecKernelNodeSetParams_v2: exec %p", e);
  graph_exec_t *x = e;
  int i = node_index(x->graph, node);
  if (i < 0 || i >= x->nnodes) VIOLATION("cuGraphExecKernelNodeSetParams_v2: node %p is not of this graph", node);
  node_t updated;
  char args[2048];
  CUresult r = read_node("cuGraphExecKernelNodeSetParams_v2", p, &updated, args, sizeof args);
  if (r != OK) return r;
  if (updated.fn != x->nodes[i].fn) VIOLATION("cuGraphExecKernelNodeSetParams_v2: node %d changes its kernel", i);
  x->nodes[i] = updated;
  logline("cuGraphExecKernelNodeSetParams_v2 %s node=%d args=%s", updated.fn->name, i, args);
  return OK;
}
CUresult cuGraphLaunch(void *e, void *stream) {
  NEED_CTX();
  if (!valid_graph_exec(e) || !valid_stream(stream)) VIOLATION("cuGraphLaunch exec=%p stream=%p", e, stream);
  graph_exec_t *x = e;
  logline("cuGraphLaunch nodes=%d", x->nnodes);
  for (int i = 0; i < x->nnodes; i++) {
    void *params[64];
    for (int k = 0; k < x->nodes[i].fn->nparams; k++) params[k] = x->nodes[i].values[k];
    CUresult r = execute(x->nodes[i].fn, x->nodes[i].dims, params);
    if (r != OK) return r;
  }
  return OK;
}
CUresult cuGraphExecDestroy(void *e) {
  NEED_CTX();
  if (!valid_graph_exec(e)) VIOLATION("cuGraphExecDestroy %p", e);
  ((graph_exec_t *)e)->live = 0;
  logline("cuGraphExecDestroy");
  return OK;
}
CUresult cuGraphDestroy(void *g) {
  NEED_CTX();
  if (!valid_graph(g)) VIOLATION("cuGraphDestroy %p", g);
  ((graph_t *)g)->live = 0;
  logline("cuGraphDestroy");
  return OK;
}
#endif

/* *** streams and events *** */
CUresult cuStreamCreate(void **s, unsigned int flags) {
  NEED_CTX();
  if (flags > 1 || nstreams == 64) VIOLATION("cuStreamCreate flags=%u", flags);
  streams[nstreams].live = 1;
  *s = &streams[nstreams++];
  logline("cuStreamCreate flags=%u", flags);
  return OK;
}
CUresult cuStreamDestroy_v2(void *s) {
  NEED_CTX();
  if (!valid_stream(s)) VIOLATION("cuStreamDestroy_v2 %p", s);
  ((stream_t *)s)->live = 0;
  logline("cuStreamDestroy_v2");
  return OK;
}
CUresult cuStreamQuery(void *s) {
  NEED_CTX();
  if (!valid_stream(s)) VIOLATION("cuStreamQuery %p", s);
  return hang ? NOT_READY : OK;
}
CUresult cuStreamWaitEvent(void *s, void *e, unsigned int flags) {
  NEED_CTX();
  if (!valid_stream(s) || !valid_event(e) || flags) VIOLATION("cuStreamWaitEvent %p %p %u", s, e, flags);
  logline("cuStreamWaitEvent");
  return OK;
}
CUresult cuEventCreate(void **e, unsigned int flags) {
  NEED_CTX();
  if ((flags & ~3u) || nevents == 4096) VIOLATION("cuEventCreate flags=%u", flags);
  events[nevents] = (event_t){1, 0, (int)flags, 0};
  *e = &events[nevents++];
  return OK;
}
CUresult cuEventDestroy_v2(void *e) {
  NEED_CTX();
  if (!valid_event(e)) VIOLATION("cuEventDestroy_v2 %p", e);
  ((event_t *)e)->live = 0;
  return OK;
}
CUresult cuEventRecord(void *e, void *s) {
  NEED_CTX();
  if (!valid_event(e) || !valid_stream(s)) VIOLATION("cuEventRecord %p %p", e, s);
  ((event_t *)e)->recorded = 1;
  ((event_t *)e)->t = clock_ms;
  return OK;
}
CUresult cuEventQuery(void *e) {
  NEED_CTX();
  if (!valid_event(e)) VIOLATION("cuEventQuery %p", e);
  return hang && ((event_t *)e)->recorded ? NOT_READY : OK;
}
static CUresult elapsed(float *ms, void *a, void *b, const char *call) {
  NEED_CTX();
  event_t *s = a, *t = b;
  if (!valid_event(a) || !valid_event(b) || !s->recorded || !t->recorded || (s->flags & 2) || (t->flags & 2))
    VIOLATION("%s: events %p %p", call, a, b);
  *ms = (float)(t->t - s->t);
  logline("%s ms=%g", call, *ms);
  return OK;
}
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { return elapsed(ms, a, b, "cuEventElapsedTime"); }
CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b) { return elapsed(ms, a, b, "cuEventElapsedTime_v2"); }
