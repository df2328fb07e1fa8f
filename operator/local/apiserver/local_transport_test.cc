// How a reader that stops leaves a local watch: at once, not at the watch's next wake-up.
#include "operator/local/apiserver/local_transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "operator/local/testing/silent_watch.h"

namespace lockstep::local {
namespace {

TEST(LocalTransportTest, CancelEndsAReadBlockedInTheWatch) {
  auto source = std::make_shared<SilentWatch>();
  std::unique_ptr<kube::BodyStream> body = NewWatchBody(source);
  absl::StatusOr<std::string> read;
  std::thread reader([&] { read = body->Read(); });
  bool blocked = source->AwaitReader(std::chrono::seconds(60));
  body->Cancel();
  reader.join();
  ASSERT_TRUE(blocked);
  EXPECT_TRUE(source->cancelled());  // told to end, not left to give up by itself
  EXPECT_TRUE(absl::IsCancelled(read.status())) << read.status();
}

TEST(LocalTransportTest, CancellingTheApiServersWatchEndsIt) {
  std::unique_ptr<ApiServer> api = ApiServer::Create({}).value();
  ApiResponse r = api->Handle({.method = "GET",
                               .path = "/api/v1/namespaces/default/pods",
                               .query = {{"watch", "true"}, {"timeoutSeconds", "3600"}}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_NE(r.watch, nullptr);
  // Left alone, Next returns "" (nothing yet) once a second for an hour. Once Cancel has
  // returned, a Next that starts must say the watch is over; one still waiting when Cancel came
  // must end too (the join would wait for it otherwise).
  std::atomic<bool> cancelled{false};
  int alive_after_cancel = 0;
  std::thread reader([&] {
    while (true) {
      bool after = cancelled.load();
      if (!r.watch->Next()) break;
      if (after) {
        ++alive_after_cancel;
        break;
      }
    }
  });
  r.watch->Cancel();
  cancelled = true;
  reader.join();
  EXPECT_EQ(alive_after_cancel, 0);
  EXPECT_EQ(r.watch->Next(), std::nullopt);
}

}  // namespace
}  // namespace lockstep::local
