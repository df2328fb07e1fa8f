// lockstep-rbac-coverage: checks a chart's RBAC against the API calls the operator really made.
//
//   lockstep-rbac-coverage --manifests RENDERED.yaml --audit AUDIT.log --user USER
//
// RENDERED.yaml is the rendered chart (its Roles, ClusterRoles and bindings are read; other
// kinds are ignored). AUDIT.log holds audit.k8s.io/v1 Events as JSON lines, from
// `lockstep local --audit-log` or a real API server's audit log at level Metadata or above.
// USER is the operator's username (system:serviceaccount:NS:NAME).
//
// It fails (exit 1), naming each, on a call of USER that was refused (401/403) or that no bound
// rule allows, and on a permission (a rule's apiGroup x resource x verb) that no call used:
// the rules must cover exactly what the operator does. A wildcard in a rule is a failure too.
// `--may-go-unused "VERB RESOURCE in group GROUP"` (repeatable) names a permission the run
// cannot exercise (a call the operator makes only in a state the cluster under test never
// reaches); it may be unused, and is still required to be in the chart.
// Prints the calls and the use of each permission either way. Usage errors exit 2.

#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/json_reader.h"
#include "operator/api/manifest.h"
#include "operator/local/apiserver/rbac.h"

namespace {

using lockstep::local::Grant;
using lockstep::local::RequestAttributes;
using nlohmann::json;

std::string Resource(const std::string& resource, const std::string& subresource) {
  return subresource.empty() ? resource : resource + "/" + subresource;
}

std::string Group(const std::string& g) { return g.empty() ? "core" : g; }

}  // namespace

int main(int argc, char** argv) {
  std::string manifests, audit, user;
  std::vector<std::string> may_go_unused;
  int flags = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    ++flags;
    if (flag == "--may-go-unused") {
      may_go_unused.push_back(argv[i + 1]);
    } else if (flag == "--manifests") {
      manifests = argv[i + 1];
    } else if (flag == "--audit") {
      audit = argv[i + 1];
    } else if (flag == "--user") {
      user = argv[i + 1];
    }
  }
  if (manifests.empty() || audit.empty() || user.empty() || argc != 1 + 2 * flags ||
      flags != 3 + static_cast<int>(may_go_unused.size())) {
    std::cerr << "usage: lockstep-rbac-coverage --manifests RENDERED.yaml --audit AUDIT.log "
                 "--user USER [--may-go-unused \"VERB RESOURCE in group GROUP\"]...\n";
    return 2;
  }
  absl::StatusOr<std::vector<json>> docs = lockstep::api::ReadManifestFile(manifests);
  if (!docs.ok()) {
    std::cerr << "lockstep-rbac-coverage: " << manifests << ": " << docs.status().message() << "\n";
    return 2;
  }
  std::ifstream in(audit);
  if (!in) {
    std::cerr << "lockstep-rbac-coverage: cannot read " << audit << "\n";
    return 2;
  }
  // The groups of a service account; a plain user is in system:authenticated only.
  std::vector<std::string> groups = {"system:authenticated"};
  if (user.rfind("system:serviceaccount:", 0) == 0) {
    std::string rest = user.substr(22);
    groups = lockstep::local::ServiceAccountGroups(rest.substr(0, rest.find(':')));
  }
  lockstep::local::RbacPolicy policy = lockstep::local::RbacPolicy::FromObjects(*docs);
  std::vector<Grant> grants = policy.GrantsFor(user, groups);

  std::vector<std::string> problems;
  std::map<std::string, int> calls;  // "verb group resource" -> count
  // Permission "grant|rule|group|resource|verb" -> calls it allowed.
  std::map<std::string, int> used;
  auto permission = [](const Grant& g, const std::string& group, const std::string& resource,
                       const std::string& verb) {
    return g.role + " rule " + std::to_string(g.rule_index) + " (bound by " + g.binding +
           "): " + verb + " " + resource + " in group " + Group(group);
  };
  for (const Grant& g : grants) {
    for (const std::string& group : g.rule.api_groups) {
      for (const std::string& resource : g.rule.resources) {
        for (const std::string& verb : g.rule.verbs) {
          if (group == "*" || resource.find('*') != std::string::npos || verb == "*") {
            problems.push_back("wildcard permission: " + permission(g, group, resource, verb));
          }
          used[permission(g, group, resource, verb)] += 0;
        }
      }
    }
  }
  int lines = 0, events = 0;
  for (std::string line; std::getline(in, line);) {
    ++lines;
    if (line.empty()) continue;
    json e = json::parse(line, nullptr, false);
    if (e.is_discarded() || !e.is_object()) {
      std::cerr << "lockstep-rbac-coverage: " << audit << " line " << lines
                << " is not a JSON object\n";
      return 2;
    }
    const json* u = lockstep::api::ObjectAt(e, "user");
    if (!u || lockstep::api::StringAt(*u, "username") != user) continue;
    const json* ref = lockstep::api::ObjectAt(e, "objectRef");
    if (!ref) continue;  // discovery and other non-resource requests: open to every user
    ++events;
    RequestAttributes r;
    r.user = user;
    r.groups = groups;
    r.verb = lockstep::api::StringAt(e, "verb");
    r.api_group = lockstep::api::StringAt(*ref, "apiGroup");
    r.resource = lockstep::api::StringAt(*ref, "resource");
    r.subresource = lockstep::api::StringAt(*ref, "subresource");
    r.ns = lockstep::api::StringAt(*ref, "namespace");
    r.name = lockstep::api::StringAt(*ref, "name");
    std::string call = r.verb + " " + Resource(r.resource, r.subresource) + " in group " +
                       Group(r.api_group) + (r.ns.empty() ? " (all namespaces)" : "");
    calls[call] += 1;
    int code = 0;
    if (const json* status = lockstep::api::ObjectAt(e, "responseStatus")) {
      code = status->value("code", 0);
    }
    if (code == 401 || code == 403) {
      problems.push_back("refused (" + std::to_string(code) + "): " + call +
                         (r.name.empty() ? "" : " \"" + r.name + "\"") +
                         (r.ns.empty() ? "" : " in namespace " + r.ns));
    }
    bool allowed = false;
    for (const Grant& g : grants) {
      if (!g.ns.empty() && g.ns != r.ns) continue;
      if (!lockstep::local::RuleMatches(g.rule, r)) continue;
      allowed = true;
      used[permission(g, r.api_group, Resource(r.resource, r.subresource), r.verb)] += 1;
    }
    if (!allowed) {
      problems.push_back("not covered by the chart's rules: " + call +
                         (r.name.empty() ? "" : " \"" + r.name + "\"") +
                         (r.ns.empty() ? "" : " in namespace " + r.ns));
    }
  }
  std::cout << "calls by " << user << " (" << events << " audited requests):\n";
  for (const auto& [call, n] : calls) std::cout << "  " << n << "\t" << call << "\n";
  std::cout << "permissions granted to it, with the calls each allowed:\n";
  for (const auto& [p, n] : used) {
    std::cout << "  " << n << "\t" << p << "\n";
    if (n > 0) continue;
    bool excused = false;
    for (const std::string& m : may_go_unused) excused = excused || p.ends_with(": " + m);
    if (!excused) problems.push_back("unused permission (no call needed it): " + p);
  }
  for (const std::string& m : may_go_unused) {
    bool granted = false;
    for (const auto& [p, n] : used) granted = granted || p.ends_with(": " + m);
    if (!granted) problems.push_back("--may-go-unused names no permission of the chart: " + m);
  }
  if (events == 0) problems.push_back("no audited request by " + user);
  for (const std::string& p : problems) std::cout << "FAIL: " << p << "\n";
  if (!problems.empty()) return 1;
  std::cout << "ok: every call is allowed, and every permission was used\n";
  return 0;
}
