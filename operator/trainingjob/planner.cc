#include "operator/trainingjob/planner.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "absl/strings/str_format.h"

#include "common/str_util.h"
#include "operator/api/conditions.h"
#include "operator/api/job_state.h"
#include "operator/api/json_reader.h"
#include "operator/api/validation.h"
#include "operator/trainingjob/elastic.h"
#include "operator/trainingjob/failure.h"
#include "operator/trainingjob/labels.h"
#include "operator/trainingjob/replica_status.h"

namespace lockstep::trainingjob {
namespace {

using api::JobState;
using api::ReplicaType;
using nlohmann::json;

// The training group: every replica type except the evaluator restarts together.
bool InGroup(ReplicaType t) { return t != ReplicaType::kEvaluator; }

class Planner {
 public:
  Planner(const Observed& o, const PlannerOptions& opt)
      : o_(o),
        job_(o.job),
        opt_(opt),
        now_(o.now),
        gen_(o.job.metadata.generation),
        st_(o.job.status.value_or(api::TrainingJobStatus{})) {}

  Plan Run() {
    const api::TrainingJobStatus before = st_;
    Decide();
    st_.replica_statuses =
        ReplicaStatuses(job_.spec, pods_, completed_, st_.replica_statuses, job_.metadata.name);
    st_.ready = ReadyString(job_.spec, st_.replica_statuses);
    api::TrainingJobStatus cmp = st_;
    cmp.last_reconcile_time = before.last_reconcile_time;
    if (!(cmp == before)) st_.last_reconcile_time = now_;
    plan_.status = std::move(st_);
    return std::move(plan_);
  }

 private:
  struct Slot {
    std::shared_ptr<const ObservedPod> pod;  // live (not being deleted)
    bool blocked = false;                    // a pod of this name still exists or is going
  };

  void Decide() {
    IndexChildren();
    if (api::IsTerminal(st_.state)) return Finish();
    api::FieldErrors errors = o_.decode_errors;
    if (errors.empty()) errors = api::ValidateTrainingJob(job_);
    if (!errors.empty()) {
      std::string msg = "invalid spec: ";
      for (size_t i = 0; i < errors.size() && i < 5; ++i) {
        msg = StrCat(msg, i == 0 ? "" : "; ", errors[i].ToString());
      }
      if (errors.size() > 5) msg = StrCat(msg, "; and ", errors.size() - 5, " more");
      Fail("InvalidSpec", msg);
      return Finish();
    }
    st_.observed_generation = gen_;
    if (job_.spec.run_policy.suspend) return Suspend();
    if (st_.state == JobState::kSuspended) {
      Move(JobState::kCreated, "Resumed", "runPolicy.suspend was cleared; pods are created again");
      st_.start_time = now_;
    } else if (st_.state == JobState::kPending) {
      Move(JobState::kCreated, "Created", "the job was accepted; creating pods and services");
    }
    // A job queued with Kueue starts when its group is admitted: its time in the queue counts
    // against no deadline (as Kueue's own integrations start the clock at admission).
    if (!st_.start_time && !WaitsForKueue()) st_.start_time = now_;
    if (job_.spec.run_policy.active_deadline_seconds && st_.start_time) {
      absl::Time deadline =
          *st_.start_time + absl::Seconds(*job_.spec.run_policy.active_deadline_seconds);
      if (now_ >= deadline) {
        Fail("DeadlineExceeded", StrCat("the job ran longer than runPolicy.activeDeadlineSeconds (",
                                        *job_.spec.run_policy.active_deadline_seconds, "s)"));
        return Finish();
      }
      Requeue(deadline - now_);
    }
    SupportObjects();
    DeleteStale();
    if (SuccessMet()) return Finish();
    NoteDisruptions();
    ReleaseKueueFinalizers();
    HandleFailures();
    if (api::IsTerminal(st_.state)) return Finish();
    CreateMissing();
    RunningState();
    Watchdogs();
    if (api::IsTerminal(st_.state)) Finish();
  }

  // ---- observation ----

  void IndexChildren() {
    for (const auto& [type, spec] : job_.spec.replica_specs) {
      completed_[type] = ParseIndexes(st_.replica_statuses[type].completed_indexes);
    }
    for (const std::shared_ptr<const ObservedPod>& pod : o_.pods) {
      std::optional<ReplicaType> type = pod->metadata.replica_type;
      int32_t index = pod->metadata.replica_index;
      if (!type || index < 0) {
        if (!pod->metadata.deletion_timestamp)
          DeletePod(*pod, "it carries no valid replica labels");
        continue;
      }
      Slot& slot = slots_[{*type, index}];
      slot.blocked = true;
      if (pod->metadata.deletion_timestamp) {
        deleting_.push_back({*type, index, pod});
        continue;
      }
      slot.pod = pod;
      pods_.push_back({*type, index, pod});
      if (pod->phase == PodPhase::kSucceeded && job_.spec.replica_specs.contains(*type)) {
        completed_[*type].insert(index);
      }
    }
  }

  // Surplus replicas (scale down) and pods of a replaced attempt.
  void DeleteStale() {
    for (auto& [key, slot] : slots_) {
      if (!slot.pod) continue;
      const auto& [type, index] = key;
      int32_t attempt = slot.pod->metadata.attempt;
      if (index >= api::ReplicaCount(job_.spec, type)) {
        DeletePod(*slot.pod, "the replica count was lowered");
        slot.pod = nullptr;
      } else if (InGroup(type) && attempt < st_.attempt &&
                 slot.pod->phase != PodPhase::kSucceeded) {
        DeletePod(*slot.pod, StrCat("attempt ", st_.attempt, " replaces attempt ", attempt));
        slot.pod = nullptr;
      }
    }
    for (const ChildRef& svc : o_.services) {
      if (svc.deleting) continue;
      std::optional<ReplicaType> type = svc.replica_type;
      int32_t index = svc.replica_index;
      if (!type || index >= api::ReplicaCount(job_.spec, *type) || index < 0) {
        Delete(ChildKind::kService, svc.name, svc.uid, "the replica count was lowered");
      }
    }
  }

  void SupportObjects() {
    if (!o_.token_secret_exists) {
      Action a{.kind = Action::Kind::kCreateTokenSecret,
               .child = ChildKind::kSecret,
               .name = TokenSecretName(job_.metadata.name),
               .why = "the job's peer token"};
      plan_.actions.push_back(std::move(a));
    }
    if (opt_.desired.gang != GangScheduler::kNone && !o_.pod_group_exists) {
      plan_.actions.push_back({.kind = Action::Kind::kCreate,
                               .child = ChildKind::kPodGroup,
                               .name = job_.metadata.name,
                               .object = DesiredPodGroup(job_, opt_.desired.gang),
                               .why = "gang scheduling"});
    }
  }

  // ---- success and failure ----

  bool SuccessMet() {
    auto done = [&](ReplicaType t, int32_t i) { return completed_[t].contains(i); };
    std::string reason;
    std::string message;
    if (job_.spec.success_policy == api::SuccessPolicy::kAllWorkers) {
      for (ReplicaType t : {ReplicaType::kChief, ReplicaType::kWorker}) {
        for (int32_t i = 0; i < api::ReplicaCount(job_.spec, t); ++i) {
          if (!done(t, i)) return false;
        }
      }
      reason = "AllWorkersSucceeded";
      message = "every chief and worker replica succeeded";
    } else if (api::ReplicaCount(job_.spec, ReplicaType::kChief) > 0) {
      if (!done(ReplicaType::kChief, 0)) return false;
      reason = "ChiefSucceeded";
      message =
          StrCat("the chief (pod ", api::ReplicaName(job_, ReplicaType::kChief, 0), ") succeeded");
    } else {
      if (api::ReplicaCount(job_.spec, ReplicaType::kWorker) == 0 ||
          !done(ReplicaType::kWorker, 0)) {
        return false;
      }
      reason = "Worker0Succeeded";
      message =
          StrCat("worker 0 (pod ", api::ReplicaName(job_, ReplicaType::kWorker, 0), ") succeeded");
    }
    if (Move(JobState::kSucceeded, reason, message)) st_.completion_time = now_;
    return true;
  }

  void HandleFailures() {
    std::map<std::string, int32_t> counted;
    std::vector<PodFailure> failures;
    for (const auto& [type, index, pod] : pods_) {
      int32_t n = FailureCount(*pod);
      std::string uid(pod->metadata.uid());
      auto it = st_.counted_failures.find(uid);
      counted[std::move(uid)] = n;
      int32_t before = it == st_.counted_failures.end() ? 0 : it->second;
      if (n <= before || slots_[{type, index}].pod != pod) continue;
      if (InGroup(type) && pod->metadata.attempt < st_.attempt) continue;
      if (pod->phase == PodPhase::kSucceeded) continue;
      PodFailure f = DescribeFailure(*pod, type, index);
      f.new_failures = n - before;
      // A trainer stopped by SIGTERM while a member of its job was disrupted stopped for that
      // disruption (the group checkpoints and stops when its coordinator's host goes): it is
      // a disruption too, not counted against backoffLimit.
      if (!st_.disruptions.empty() && f.reason == "Terminated") f.disruption = true;
      failures.push_back(std::move(f));
    }
    st_.counted_failures = std::move(counted);
    if (failures.empty()) return;

    const PodFailure* fatal = nullptr;
    const PodFailure* group_cause = nullptr;
    bool group_counted = false;
    int32_t counted_restarts = 0;
    std::vector<const PodFailure*> pod_restarts;
    for (const PodFailure& f : failures) {
      FailureDecision d = DecideFailure(f, job_.spec);
      switch (d.remedy) {
        case Remedy::kFailJob:
          if (fatal == nullptr) fatal = &f;
          break;
        case Remedy::kRestartGroup:
          if (group_cause == nullptr || (d.counted && !group_counted)) group_cause = &f;
          group_counted = group_counted || d.counted;
          break;
        case Remedy::kRestartPod:
          pod_restarts.push_back(&f);
          // The evaluator's restarts are its own: they never spend the job's budget.
          if (d.counted && f.type != ReplicaType::kEvaluator) {
            counted_restarts += f.restarted_in_place ? f.new_failures : 1;
          }
          break;
        case Remedy::kLeaveFailed:
          Event(EventType::kWarning, FailureReason(f),
                StrCat(FailureMessage(f), "; the evaluator is left failed, the job goes on"));
          break;
      }
    }
    if (fatal != nullptr) return Fail(FailureReason(*fatal), FailureMessage(*fatal));
    if (group_cause != nullptr) {
      // A group restart replaces the training pods, so their own restarts are part of it and
      // it counts once; what remains to restart alone is an evaluator, which never counts.
      std::erase_if(pod_restarts, [](const PodFailure* f) { return InGroup(f->type); });
      counted_restarts = group_counted ? 1 : 0;
    }
    const int32_t limit = job_.spec.run_policy.backoff_limit;
    if (st_.restart_count + counted_restarts > limit) {
      const PodFailure& last = group_cause != nullptr ? *group_cause : *pod_restarts.back();
      return Fail("BackoffLimitExceeded",
                  StrCat("restarting again would make ", st_.restart_count + counted_restarts,
                         " restarts, over runPolicy.backoffLimit ", limit,
                         "; last failure: ", FailureMessage(last)));
    }
    st_.restart_count += counted_restarts;
    for (const PodFailure* f : pod_restarts) {
      st_.replica_statuses[f->type].restarts += f->restarted_in_place ? f->new_failures : 1;
      Slot& slot = slots_.at({f->type, f->index});
      if (!f->restarted_in_place && slot.pod) {
        DeletePod(*slot.pod, StrCat("restart after: ", FailureMessage(*f)));
        slot.pod = nullptr;
        // A member of the training group recreated alone (in-place recovery) is the next
        // incarnation of its replica, within the same attempt.
        if (InGroup(f->type)) st_.incarnations[f->pod_name] += 1;
      }
    }
    if (group_cause != nullptr) {
      st_.attempt += 1;
      st_.incarnations.clear();
      st_.disruptions.clear();
      for (auto& [key, slot] : slots_) {
        if (!slot.pod || !InGroup(key.first) || slot.pod->phase == PodPhase::kSucceeded) continue;
        DeletePod(*slot.pod, StrCat("group restart to attempt ", st_.attempt));
        slot.pod = nullptr;
      }
      st_.replica_statuses[group_cause->type].restarts += 1;
      Move(JobState::kRestarting, FailureReason(*group_cause),
           StrCat(FailureMessage(*group_cause), "; restarting the training group as attempt ",
                  st_.attempt));
    } else if (!pod_restarts.empty()) {
      const PodFailure& f = *pod_restarts.front();
      const bool group_member = InGroup(f.type) && api::EffectiveStrategy(job_.spec) ==
                                                       api::Strategy::kMultiWorkerMirrored;
      Move(JobState::kRestarting, FailureReason(f),
           StrCat(
               FailureMessage(f), "; restarting ", f.restarted_in_place ? "in place" : "the pod",
               group_member ? " alone: the other replicas keep their state and hand it over" : ""));
    }
  }

  // A pod of the job deleted or evicted by another party (kubectl delete, a drain's eviction,
  // a preemption, a NoExecute taint) while it ran: its replica is replaced alone, within the
  // attempt, as the next incarnation, and the disruption spends nothing of backoffLimit. A
  // member of a group that recovers in place left it at a step boundary on SIGTERM (the trainer's
  // graceful leave); the others wait for its replacement and hand it their state. Seen once per
  // incarnation: the one being deleted is then older than the next.
  void NoteDisruptions() {
    for (const auto& [type, index, pod] : deleting_) {
      if (index >= api::ReplicaCount(job_.spec, type)) continue;  // scaled down
      if (InGroup(type) && pod->metadata.attempt < st_.attempt) continue;
      // A pod that ended on its own before it was deleted was not disrupted; one marked for a
      // disruption (DisruptionTarget, Kueue's TerminationTarget) was, however soon its
      // containers stopped.
      if ((pod->phase == PodPhase::kSucceeded || pod->phase == PodPhase::kFailed) &&
          !pod->disruption_target) {
        continue;
      }
      const std::string name(pod->metadata.name());
      auto inc = st_.incarnations.find(name);
      if (pod->metadata.incarnation < (inc == st_.incarnations.end() ? 0 : inc->second)) continue;
      st_.incarnations[name] = pod->metadata.incarnation + 1;
      const auto [reason, cause] = DisruptionCause(*pod);
      st_.disruptions[name] = cause;
      const std::string_view type_name = api::NameOf<ReplicaType>(api::kReplicaTypeNames, type);
      const bool in_place_member =
          InGroup(type) && api::EffectiveRecovery(job_.spec) == api::Recovery::kInPlace;
      std::string how = "replacing the pod alone";
      if (in_place_member) {
        how +=
            ": it left the group at a step boundary, the other replicas keep their state and "
            "take its replacement in";
      } else if (InGroup(type) &&
                 api::EffectiveStrategy(job_.spec) != api::Strategy::kParameterServer) {
        how += ": the group checkpoints, stops and resumes from that checkpoint with it";
      }
      const std::string message =
          StrCat(type_name, " ", index, " (pod ", name, ") was ", cause, "; ", how,
                 " (a disruption: not counted against runPolicy.backoffLimit)");
      const std::string event_reason = StrCat(type_name, reason);
      if (st_.state == JobState::kRestarting ||
          !Move(JobState::kRestarting, event_reason, message)) {
        Event(EventType::kWarning, event_reason, message, /*essential=*/true);
      }
    }
    // Outside a group that recovers in place, a disruption is over once the replacement runs.
    std::erase_if(st_.disruptions, [&](const auto& entry) {
      for (const auto& [type, index, pod] : pods_) {
        if (pod->metadata.name() != entry.first) continue;
        const bool reported_by_trainer =
            InGroup(type) && api::EffectiveRecovery(job_.spec) == api::Recovery::kInPlace;
        return !reported_by_trainer && PodRunning(*pod);
      }
      return false;
    });
  }

  // What a disruption is called in a condition reason (WorkerEvicted) and said in a message,
  // from the pod's DisruptionTarget condition (none: a plain delete).
  static std::pair<std::string, std::string> DisruptionCause(const ObservedPod& pod) {
    const PodDetail& why = pod.why();
    std::pair<std::string, std::string> out;
    const std::string& r = why.disruption_reason;
    if (!pod.disruption_target) {
      out = {"Deleted", "deleted by another party (not the operator)"};
    } else if (r == "EvictionByEvictionAPI") {
      out = {"Evicted", "evicted through the Eviction API (a node drain or an eviction request)"};
    } else if (r == "PreemptionByScheduler" || r == "PreemptionByKubeScheduler") {
      out = {"Preempted", "preempted by the scheduler for a pod of higher priority"};
    } else if (r == "DeletionByTaintManager") {
      out = {"Evicted", "deleted by the taint manager (its node has a NoExecute taint)"};
    } else if (r == "TerminationByKubelet") {
      out = {"Evicted", "terminated by the kubelet (node pressure or shutdown)"};
    } else {
      out = {"Disrupted", StrCat("disrupted (DisruptionTarget ", r.empty() ? "True" : r, ")")};
    }
    if (!why.disruption_message.empty()) out.second += StrCat(": ", why.disruption_message);
    return out;
  }

  // ---- creation and state ----

  void CreateMissing() {
    std::set<std::string> services;
    for (const ChildRef& s : o_.services) services.insert(s.name);
    for (const auto& [type, spec] : job_.spec.replica_specs) {
      for (int32_t i = 0; i < spec.replicas; ++i) {
        if (completed_[type].contains(i)) continue;
        std::string name = api::ReplicaName(job_, type, i);
        if (!services.contains(name)) {
          plan_.actions.push_back({.kind = Action::Kind::kCreate,
                                   .child = ChildKind::kService,
                                   .name = name,
                                   .object = DesiredService(job_, type, i),
                                   .why = "peer discovery"});
        }
        if (slots_[{type, i}].blocked) continue;
        Action a{.kind = Action::Kind::kCreate, .child = ChildKind::kPod, .name = name};
        auto inc = st_.incarnations.find(name);
        const int32_t incarnation = inc == st_.incarnations.end() ? 0 : inc->second;
        a.object = DesiredPod(job_, type, i, st_.attempt, opt_.desired, &a.kept_env, incarnation);
        a.why = incarnation == 0 ? StrCat("attempt ", st_.attempt)
                                 : StrCat("attempt ", st_.attempt, ", incarnation ", incarnation);
        plan_.actions.push_back(std::move(a));
      }
    }
  }

  void RunningState() {
    if (st_.state != JobState::kCreated && st_.state != JobState::kRestarting) return;
    int32_t running = 0;
    for (const auto& [type, spec] : job_.spec.replica_specs) {
      if (!InGroup(type)) continue;
      for (int32_t i = 0; i < spec.replicas; ++i) {
        if (completed_[type].contains(i)) continue;
        const Slot& slot = slots_[{type, i}];
        if (!slot.pod || !PodRunning(*slot.pod)) return;
        ++running;
      }
    }
    Move(JobState::kRunning, "AllReplicasRunning",
         StrCat(running, " training pods of attempt ", st_.attempt, " are running"));
  }

  // A container waiting for a reason that only a change of the cluster's objects or the pod's
  // template ends (a missing ConfigMap or Secret, an image that cannot be pulled), as the
  // kubelet reports it: the pod cannot start, whatever the wait.
  // A volume that cannot be mounted (FailedMount events) counts as the same kind of reason.
  std::optional<std::pair<std::string, std::string>> CannotStart(const ObservedPod& pod) const {
    const ContainerState& w = pod.why().waiting;
    const std::string& r = w.reason;
    if (r == "CreateContainerConfigError" || r == "CreateContainerError" || r == "ErrImagePull" ||
        r == "ImagePullBackOff" || r == "InvalidImageName" || r == "ErrImageNeverPull") {
      return std::pair{r, w.message};
    }
    auto mount = o_.mount_failures.find(std::string(pod.metadata.name()));
    if (mount != o_.mount_failures.end())
      return std::pair{std::string("FailedMount"), mount->second};
    return std::nullopt;
  }

  void Watchdogs() {
    std::optional<std::string> stalled_reason;
    std::string stalled_message;
    const absl::Duration pending_limit =
        absl::Seconds(job_.spec.run_policy.pending_timeout_seconds);
    for (const auto& [type, index, pod] : pods_) {
      if (pod->phase != PodPhase::kPending || !pod->metadata.creation_timestamp) continue;
      // Waiting for Kueue to admit its group: queued, not stalled.
      if (pod->gated) continue;
      absl::Duration age = now_ - *pod->metadata.creation_timestamp;
      if (auto blocked = CannotStart(*pod)) {
        // Said at once (Stalled, with the kubelet's reason and an event); the job fails with
        // it once the pod has waited runPolicy.pendingTimeoutSeconds, rather than waiting on.
        const auto& [reason, detail] = *blocked;
        const std::string what = StrCat("pod ", pod->metadata.name(), " cannot start: ", reason,
                                        detail.empty() ? "" : ": ", detail);
        if (age >= pending_limit) {
          Fail(StrCat(api::NameOf<ReplicaType>(api::kReplicaTypeNames, type), reason),
               StrCat(what, " (still, after runPolicy.pendingTimeoutSeconds ",
                      job_.spec.run_policy.pending_timeout_seconds, ")"));
          return;
        }
        if (!stalled_reason) {
          stalled_reason = reason;
          stalled_message =
              StrCat(what, "; the job fails if it still cannot at ",
                     api::FormatKubeTime(*pod->metadata.creation_timestamp + pending_limit),
                     " (runPolicy.pendingTimeoutSeconds ",
                     job_.spec.run_policy.pending_timeout_seconds, ")");
        }
        Requeue(pending_limit - age);
        continue;
      }
      // Past the grace, the reconciler looks for the pod's FailedMount events.
      if (age < kMountGrace && pod->why().waiting.reason == "ContainerCreating") {
        Requeue(kMountGrace - age);
      }
      if (age >= pending_limit) {
        stalled_reason = "PodPending";
        // The fact and when it began, never an age: the status changes only when the fact does.
        stalled_message =
            StrCat("pod ", pod->metadata.name(), " has been Pending since ",
                   api::FormatKubeTime(*pod->metadata.creation_timestamp),
                   " (runPolicy.pendingTimeoutSeconds ",
                   job_.spec.run_policy.pending_timeout_seconds, ")", PendingDetail(*pod));
        break;
      }
      Requeue(pending_limit - age);
    }
    if (o_.progress) MergeProgress(*o_.progress);
    if (!stalled_reason && st_.state == JobState::kRunning &&
        job_.spec.run_policy.progress_deadline_seconds) {
      absl::Duration limit = absl::Seconds(*job_.spec.run_policy.progress_deadline_seconds);
      const api::Condition* running =
          api::FindCondition(st_.conditions, api::ConditionType::kRunning);
      absl::Time since = running != nullptr ? running->last_transition_time : now_;
      if (st_.progress && st_.progress->update_time && *st_.progress->update_time > since) {
        since = *st_.progress->update_time;
      }
      if (now_ - since >= limit) {
        stalled_reason = "NoProgress";
        stalled_message = StrCat("no training step since ", api::FormatKubeTime(since),
                                 " (runPolicy.progressDeadlineSeconds ",
                                 *job_.spec.run_policy.progress_deadline_seconds, "); last step ",
                                 st_.progress ? st_.progress->step : 0);
      } else {
        Requeue(since + limit - now_);
      }
    }
    bool was = api::IsConditionTrue(st_.conditions, api::ConditionType::kStalled);
    if (stalled_reason) {
      const api::Condition* before =
          api::FindCondition(st_.conditions, api::ConditionType::kStalled);
      const bool changed =
          was && before != nullptr &&
          (before->reason != *stalled_reason || before->message != stalled_message);
      if (api::SetStalled(&st_, true, *stalled_reason, stalled_message, gen_, now_).ok() &&
          (!was || changed)) {
        Event(EventType::kWarning, *stalled_reason, stalled_message, /*essential=*/true);
      }
    } else if (was) {
      (void)api::SetStalled(&st_, false, "Progressing", "the job is making progress again", gen_,
                            now_);
    }
  }

  // The trainer's recoveries, each new one (by its membership epoch within the attempt) kept
  // in status.recoveries with an event.
  void MergeRecoveries(std::vector<api::RecoveryRecord> reported) {
    int64_t newest = -1;
    for (const api::RecoveryRecord& r : st_.recoveries) {
      if (r.attempt == st_.attempt) newest = std::max(newest, r.epoch);
    }
    for (api::RecoveryRecord& r : reported) {
      if (r.epoch <= newest) continue;
      newest = r.epoch;
      r.attempt = st_.attempt;
      if (r.planned) {
        Event(EventType::kNormal, "Regrouped",
              StrCat(r.cause, "; training again at step ", r.resumed_step,
                     r.replicas > 0 ? StrCat(" with ", r.replicas, " replicas ") : " ",
                     absl::StrFormat("%.2f", r.recovery_seconds), "s after the change began"));
        st_.recoveries.push_back(std::move(r));
        continue;
      }
      TakeDisruptionCause(r);
      Event(EventType::kNormal, "RecoveredInPlace",
            StrCat(r.replaced.empty() ? "the group"
                   : r.cause.empty()  ? r.replaced + " replaced;"
                                      : r.replaced + " replaced (" + r.cause + ");",
                   " training again at step ", r.resumed_step, " ",
                   absl::StrFormat("%.2f", r.recovery_seconds), "s after the failure (rendezvous ",
                   absl::StrFormat("%.2f", r.rendezvous_seconds), "s, state handed over in ",
                   absl::StrFormat("%.2f", r.state_transfer_seconds), "s); ", r.steps_lost,
                   " completed steps lost"));
      st_.recoveries.push_back(std::move(r));
    }
    if (st_.recoveries.size() > api::kMaxRecoveryRecords) {
      st_.recoveries.erase(st_.recoveries.begin(), st_.recoveries.end() - api::kMaxRecoveryRecords);
    }
  }

  // A recovery whose replaced replica was disrupted names the disruption too, which is then
  // over.
  void TakeDisruptionCause(api::RecoveryRecord& r) {
    for (auto it = st_.disruptions.begin(); it != st_.disruptions.end();) {
      bool named = false;
      for (const auto& [type, spec] : job_.spec.replica_specs) {
        for (int32_t i = 0; i < spec.replicas && !named; ++i) {
          if (api::ReplicaName(job_, type, i) != it->first) continue;
          named = r.replaced.find(StrCat(api::ReplicaTypeLower(type), " ", i)) != std::string::npos;
        }
      }
      if (!named) {
        ++it;
        continue;
      }
      r.cause =
          StrCat(r.cause, r.cause.empty() ? "" : "; ", "pod ", it->first, " was ", it->second);
      it = st_.disruptions.erase(it);
    }
  }

  void MergeProgress(api::Progress p) {
    MergeRecoveries(std::move(p.recoveries));
    p.recoveries.clear();
    if (st_.progress && st_.progress->step == p.step && st_.progress->update_time) {
      p.update_time = st_.progress->update_time;
    } else {
      p.update_time = now_;
    }
    p.summary = ProgressSummary(p);
    st_.progress = std::move(p);
  }

  // ---- endings ----

  void Suspend() {
    ReleaseKueueFinalizers();
    for (auto& [key, slot] : slots_) {
      if (slot.pod) DeletePod(*slot.pod, "the job is suspended");
    }
    for (const ChildRef& s : o_.services) {
      if (!s.deleting) Delete(ChildKind::kService, s.name, s.uid, "the job is suspended");
    }
    if (st_.state != JobState::kSuspended) {
      Move(JobState::kSuspended, "Suspended",
           "runPolicy.suspend is set; pods and services deleted");
    }
  }

  // A succeeded job's final figures, which the pod that decided the success (the chief, else
  // worker 0) left in its termination message: its last progress (the poll's is up to an
  // interval old) and its test-set evaluation.
  void TakeFinalFigures() {
    if (st_.state != JobState::kSucceeded) return;
    const ReplicaType t = api::ReplicaCount(job_.spec, ReplicaType::kChief) > 0
                              ? ReplicaType::kChief
                              : ReplicaType::kWorker;
    auto it = slots_.find({t, 0});
    if (it == slots_.end() || !it->second.pod || it->second.pod->phase != PodPhase::kSucceeded) {
      return;
    }
    const PodDetail& why = it->second.pod->why();
    if (why.final_progress) {
      api::Progress p = *why.final_progress;
      p.recoveries.clear();
      p.update_time = st_.progress && st_.progress->step == p.step && st_.progress->update_time
                          ? st_.progress->update_time
                          : std::optional<absl::Time>(now_);
      if (!p.replicas && st_.progress) p.replicas = st_.progress->replicas;
      if (!p.global_batch && st_.progress) p.global_batch = st_.progress->global_batch;
      p.summary = ProgressSummary(p);
      st_.progress = std::move(p);
    }
    if (why.final_evaluation) {
      api::Evaluation e = *why.final_evaluation;
      std::vector<std::string> parts;
      for (const auto& [name, value] : e.metrics) {
        parts.push_back(absl::StrFormat("%s %.4f", name, value));
      }
      if (e.loss) parts.push_back(absl::StrFormat("loss %.4f", *e.loss));
      e.summary = StrJoin(parts, ", ");
      st_.evaluation = std::move(e);
    }
  }

  // Terminal: the final figures, cleanPodPolicy, then the TTL.
  void Finish() {
    if (!st_.completion_time) st_.completion_time = now_;
    TakeFinalFigures();
    FinishKueueGroup();
    api::CleanPodPolicy policy = job_.spec.run_policy.clean_pod_policy;
    // The chief's and workers' pods of a succeeded job end on their own a moment after the pod
    // that decided it (a MultiWorkerMirrored group's last barrier): they are given that moment,
    // so they end Completed with their logs rather than deleted while running. Parameter
    // servers, which serve until stopped, go at once.
    const absl::Duration finishing = absl::Seconds(30);
    if (policy != api::CleanPodPolicy::kNone) {
      for (auto& [key, slot] : slots_) {
        if (!slot.pod) continue;
        bool finished =
            slot.pod->phase == PodPhase::kSucceeded || slot.pod->phase == PodPhase::kFailed;
        if (policy == api::CleanPodPolicy::kRunning && !finished &&
            st_.state == JobState::kSucceeded &&
            (key.first == ReplicaType::kChief || key.first == ReplicaType::kWorker) &&
            now_ - *st_.completion_time < finishing) {
          Requeue(*st_.completion_time + finishing - now_);
          continue;
        }
        if (policy == api::CleanPodPolicy::kAll || !finished) {
          DeletePod(*slot.pod, StrCat("cleanPodPolicy ", api::NameOf<api::CleanPodPolicy>(
                                                             api::kCleanPodPolicyNames, policy)));
          slot.pod = nullptr;
        }
      }
      for (const ChildRef& s : o_.services) {
        if (!s.deleting) Delete(ChildKind::kService, s.name, s.uid, "the job finished");
      }
    }
    if (job_.spec.run_policy.ttl_seconds_after_finished) {
      absl::Time expiry =
          *st_.completion_time + absl::Seconds(*job_.spec.run_policy.ttl_seconds_after_finished);
      if (now_ >= expiry) {
        plan_.actions.push_back(
            {.kind = Action::Kind::kDeleteJob,
             .child = ChildKind::kTrainingJob,
             .name = job_.metadata.name,
             .uid = job_.metadata.uid,
             .why = StrCat("runPolicy.ttlSecondsAfterFinished (",
                           *job_.spec.run_policy.ttl_seconds_after_finished, "s) passed")});
      } else {
        Requeue(expiry - now_);
      }
    }
  }

  // ---- Kueue's pod groups (docs/tasks/queue-with-kueue.md) ----

  // A pod of a running job that is going (deleted by the operator for a restart, by Kueue on a
  // preemption, by someone else) and no longer runs: Kueue's finalizer, which Kueue would hold
  // until a replacement exists, is taken off, so that the replacement can take its name.
  void ReleaseKueueFinalizers() {
    for (const auto& [type, index, pod] : deleting_) {
      if (pod->kueue_finalizer < 0) continue;
      const bool stopped = pod->phase == PodPhase::kSucceeded || pod->phase == PodPhase::kFailed ||
                           (pod->phase == PodPhase::kPending && pod->gated);
      if (!stopped) continue;
      const std::string at = StrCat("/metadata/finalizers/", pod->kueue_finalizer);
      plan_.actions.push_back(
          {.kind = Action::Kind::kPatch,
           .child = ChildKind::kPod,
           .name = std::string(pod->metadata.name()),
           .uid = std::string(pod->metadata.uid()),
           .object =
               json::array({{{"op", "test"},
                             {"path", "/metadata/uid"},
                             {"value", std::string(pod->metadata.uid())}},
                            {{"op", "test"}, {"path", at}, {"value", std::string(kKueueFinalizer)}},
                            {{"op", "remove"}, {"path", at}}}),
           .why = "its replacement takes its name",
           .json_patch = true});
    }
  }

  // Queued with Kueue and not admitted yet: no pod yet, or every one still gated.
  bool WaitsForKueue() const {
    if (!KueueQueue(job_, opt_.desired.gang)) return false;
    for (const auto& [type, index, pod] : pods_) {
      if (!pod->gated) return false;
    }
    return true;
  }

  // The job has ended: every pod of its group says so to Kueue (retriable-in-group "false"),
  // which then finishes the group's Workload, releasing its quota, once no pod runs.
  void FinishKueueGroup() {
    if (!KueueQueue(job_, opt_.desired.gang)) return;
    for (const std::shared_ptr<const ObservedPod>& pod : o_.pods) {
      if (pod->kueue_group_done || pod->kueue_finalizer < 0) continue;
      json patch = {
          {"metadata", {{"annotations", {{std::string(kKueueRetriableAnnotation), "false"}}}}}};
      plan_.actions.push_back({.kind = Action::Kind::kPatch,
                               .child = ChildKind::kPod,
                               .name = std::string(pod->metadata.name()),
                               .uid = std::string(pod->metadata.uid()),
                               .object = std::move(patch),
                               .why = "the job has ended"});
    }
  }

  void Fail(const std::string& reason, const std::string& message) {
    if (Move(JobState::kFailed, reason, message)) st_.completion_time = now_;
  }

  // ---- helpers ----

  bool Move(JobState to, const std::string& reason, const std::string& message) {
    JobState from = st_.state;
    if (!api::TransitionTo(&st_, to, reason, message, gen_, now_).ok()) return false;
    if (from != to) {
      bool warn = to == JobState::kFailed || to == JobState::kRestarting;
      Event(warn ? EventType::kWarning : EventType::kNormal, reason, message, /*essential=*/true);
    }
    return true;
  }

  void Event(EventType type, std::string reason, std::string message, bool essential = false) {
    plan_.events.push_back({type, std::move(reason), std::move(message), essential});
  }

  void Requeue(absl::Duration d) {
    d = std::max(d, absl::Seconds(1));
    if (!plan_.requeue_after || d < *plan_.requeue_after) plan_.requeue_after = d;
  }

  void DeletePod(const ObservedPod& pod, std::string why) {
    Delete(ChildKind::kPod, std::string(pod.metadata.name()), std::string(pod.metadata.uid()),
           std::move(why));
  }

  void Delete(ChildKind child, const std::string& name, const std::string& uid, std::string why) {
    for (const Action& a : plan_.actions) {
      if (a.kind == Action::Kind::kDelete && a.child == child && a.name == name) return;
    }
    plan_.actions.push_back({.kind = Action::Kind::kDelete,
                             .child = child,
                             .name = name,
                             .uid = uid,
                             .why = std::move(why)});
  }

  const Observed& o_;
  const api::TrainingJob& job_;
  const PlannerOptions& opt_;
  const absl::Time now_;
  const int64_t gen_;
  api::TrainingJobStatus st_;
  Plan plan_;
  std::map<std::pair<ReplicaType, int32_t>, Slot> slots_;
  std::vector<ReplicaPod> pods_;      // live pods, in the order observed
  std::vector<ReplicaPod> deleting_;  // pods being deleted
  std::map<ReplicaType, std::set<int32_t>> completed_;
};

}  // namespace

bool WaitsToMount(const ObservedPod& pod, absl::Time now) {
  return pod.phase == PodPhase::kPending && !pod.metadata.deletion_timestamp &&
         pod.metadata.creation_timestamp && now - *pod.metadata.creation_timestamp >= kMountGrace &&
         pod.why().waiting.reason == "ContainerCreating";
}

Plan MakePlan(const Observed& observed, const PlannerOptions& options) {
  // A job is planned at the replica counts it runs at, an elastic one at the Worker count
  // accepted (elastic.h).
  Observed held = observed;
  std::vector<PlannedEvent> events = HoldReplicaCounts(held);
  std::vector<PlannedEvent> elastic = HoldElasticWorkers(held);
  events.insert(events.end(), elastic.begin(), elastic.end());
  Plan plan = Planner(held, options).Run();
  plan.events.insert(plan.events.begin(), events.begin(), events.end());
  return plan;
}

}  // namespace lockstep::trainingjob
