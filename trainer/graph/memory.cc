#include "trainer/graph/memory.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace lockstep::trainer::graph {
namespace {

int64_t ReadInt(const std::string& path) {
  std::ifstream f(path);
  std::string v;
  if (!(f >> v) || v == "max") return -1;
  try {
    return std::stoll(v);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

int64_t AvailableMemoryBytes(const std::string& root) {
  int64_t available = -1;
  std::ifstream meminfo(root + "/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemAvailable:") {
      available = kb * 1024;
      break;
    }
  }
  // cgroup v2: the container's limit less what it uses, not counting its page cache (charged
  // to memory.current, but reclaimed before the container's OOM killer acts).
  const int64_t max = ReadInt(root + "/sys/fs/cgroup/memory.max");
  const int64_t current = ReadInt(root + "/sys/fs/cgroup/memory.current");
  if (max > 0 && current >= 0) {
    int64_t file = 0;
    std::ifstream stat(root + "/sys/fs/cgroup/memory.stat");
    std::string name;
    int64_t value = 0;
    while (stat >> name >> value) {
      if (name == "file") {
        file = value;
        break;
      }
    }
    const int64_t used = current > file ? current - file : 0;
    const int64_t left = max > used ? max - used : 0;
    if (available < 0 || left < available) available = left;
  }
  return available;
}

std::string Bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (bytes >= 1000 && u < 5) {
    bytes /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

}  // namespace lockstep::trainer::graph
