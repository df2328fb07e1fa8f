#pragma once
// Small helpers over JSON objects shared by the local API server and its kind strategies:
// metadata access, timestamps and generated names as the Kubernetes API server makes them.
// Thread-safety: pure functions, except that NewUid and RandomSuffix draw from a per-thread
// random generator.

#include <string>

#include <nlohmann/json.hpp>

namespace lockstep::local {

// Compact JSON, invalid UTF-8 replaced rather than thrown on.
std::string Dump(const nlohmann::json& j);

// The current time as Kubernetes writes it ("2026-11-24T10:00:00Z").
std::string Now();

// A random RFC 4122 version-4 UID, and a random suffix of `n` characters for generateName.
std::string NewUid();
std::string RandomSuffix(size_t n);

// obj["metadata"], made an object first if it is missing or not one.
nlohmann::json& Meta(nlohmann::json& obj);

// metadata.<key> as a string; "" when absent or not a string.
std::string MetaString(const nlohmann::json& obj, const char* key);

}  // namespace lockstep::local
