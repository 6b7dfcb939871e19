// A device timeline for any CUDA program, loaded by the driver through
// CUDA_INJECTION64_PATH (no change to the program): CUPTI's activity records of kernels,
// copies and runtime calls whose start falls in a time window, written as CSV lines
//   kind,start_ns,end_ns,name      (kind: K kernel, M copy, R runtime call; times from the window start)
// Build:  g++ -O2 -shared -fPIC -I/usr/local/cuda/include cupti_trace.cpp
//           -o libcupti_trace.so -L/usr/local/cuda/lib64 -lcupti
// Use:    CUDA_INJECTION64_PATH=$PWD/libcupti_trace.so QWENRT_TRACE_OUT=trace.csv
//           QWENRT_TRACE_SKIP_S=20 QWENRT_TRACE_SPAN_S=2 qwenrt serve ...
// then scripts/timeline/timeline.py trace.csv. The records are written when the program
// exits normally. Tracing costs host time per call and per graph node (a recorded decode
// step's launch reads ≈ 0.3 ms longer under it), so read host gaps from the program's own
// timers and kernel times from here.
#include <cupti.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

FILE* out = nullptr;
uint64_t window_begin = 0, window_end = 0;
std::mutex out_mutex;

double env_seconds(const char* name, double fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atof(value) : fallback;
}

void CUPTIAPI request_buffer(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = size_t{8} << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_done(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(out_mutex);
  CUpti_Activity* record = nullptr;
  char copy_name[64];
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    uint64_t start = 0, end = 0;
    const char* name = "";
    char kind = 0;
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      start = k->start, end = k->end, name = k->name, kind = 'K';
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      start = m->start, end = m->end, kind = 'M';
      std::snprintf(copy_name, sizeof copy_name, "copy%d_%llu", static_cast<int>(m->copyKind),
                    static_cast<unsigned long long>(m->bytes));  // 1 host→device, 2 device→host
      name = copy_name;
    } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const auto* r = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      start = r->start, end = r->end, kind = 'R';
      const char* call = nullptr;
      cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, r->cbid, &call);
      name = call != nullptr ? call : "?";
    }
    if (kind == 0 || start < window_begin || start > window_end) continue;
    std::fprintf(out, "%c,%llu,%llu,%.100s\n", kind, static_cast<unsigned long long>(start - window_begin),
                 static_cast<unsigned long long>(end - window_begin), name);
  }
  std::free(buffer);
}

void flush_at_exit() {
  cuptiActivityFlushAll(1);
  if (out != nullptr) std::fclose(out);
}

}  // namespace

extern "C" int InitializeInjection() {
  const char* path = std::getenv("QWENRT_TRACE_OUT");
  if (path == nullptr || (out = std::fopen(path, "w")) == nullptr) return 1;
  uint64_t now = 0;
  cuptiGetTimestamp(&now);
  window_begin = now + static_cast<uint64_t>(env_seconds("QWENRT_TRACE_SKIP_S", 0) * 1e9);
  window_end = window_begin + static_cast<uint64_t>(env_seconds("QWENRT_TRACE_SPAN_S", 1) * 1e9);
  cuptiActivityRegisterCallbacks(request_buffer, buffer_done);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
  std::atexit(flush_at_exit);
  return 1;
}
