// Personality files: the shipped ones load as the policies they document, and every bad
// input gets its own clear error naming the file (and line).
#include "core/cm/personality.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <string>

namespace rdma_interop::cm {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path kShipped = RDMA_INTEROP_TEST_PERSONALITY_DIR;

// A scratch directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "personality_test.XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path write(const std::string& name, const std::string& text) const {
    auto p = path_ / name;
    std::ofstream(p) << text;
    return p;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

Personality load_shipped(const std::string& name) {
  auto p = load_personality_file(kShipped / (name + ".json"));
  EXPECT_TRUE(p.has_value()) << (p ? "" : p.error());
  return p ? *p : Personality{};
}

std::string parse_error(const std::string& text) {
  auto p = parse_personality(text, "t.json", "t");
  EXPECT_FALSE(p.has_value()) << "parsed: " << *p;
  return p ? std::string() : p.error();
}

// --- the shipped personalities ---------------------------------------------------------

TEST(ShippedPersonality, SiwIsRevision2WriteReadRtrWhenAskedNoMarkersNoFallback) {
  auto p = load_shipped("siw");
  EXPECT_EQ(p.name, "siw");
  EXPECT_EQ(p.mpa.revision, 2);
  EXPECT_EQ(p.mpa.crc, CrcMode::kOptional);
  EXPECT_FALSE(p.mpa.markers_wanted);
  EXPECT_FALSE(p.mpa.markers_supported);
  EXPECT_EQ(p.mpa.peer_to_peer, PeerToPeer::kWhenAsked);
  EXPECT_EQ(p.mpa.rtr_offer, (RtrSet{.send = false, .write = true, .read = true}));
  EXPECT_EQ(p.mpa.rtr_preference, (std::vector{RtrType::kWrite, RtrType::kRead}));
  EXPECT_FALSE(p.mpa.strict_ird_ord);
  EXPECT_EQ(p.mpa.private_data_limit, 256u);
  EXPECT_FALSE(p.mpa.fallback_to_revision1);
  EXPECT_TRUE(p.mpa.send_rtr);
  EXPECT_EQ(p.mpa.request_timeout, 5000ms);
  EXPECT_EQ(p.mpa.reply_timeout, 10000ms);
  EXPECT_EQ(p.private_data, (std::vector<std::uint8_t>{'s', 'i', 'w'}));
  EXPECT_EQ(p.source_path, (kShipped / "siw.json").string());
  EXPECT_FALSE(p.description.empty());
}

TEST(ShippedPersonality, Cxgb4IsPeerToPeerReadRtrCrcIrdOrd32AndFallsBack) {
  auto p = load_shipped("cxgb4");
  EXPECT_EQ(p.mpa.revision, 2);
  EXPECT_EQ(p.mpa.crc, CrcMode::kWant);
  EXPECT_FALSE(p.mpa.markers_wanted);
  EXPECT_EQ(p.mpa.peer_to_peer, PeerToPeer::kOn);
  EXPECT_EQ(p.mpa.rtr_offer, (RtrSet{.send = false, .write = false, .read = true}));
  EXPECT_EQ(p.mpa.rtr_preference, (std::vector{RtrType::kRead}));
  EXPECT_EQ(p.mpa.ird, 32);
  EXPECT_EQ(p.mpa.ord, 32);
  EXPECT_FALSE(p.mpa.strict_ird_ord);
  EXPECT_TRUE(p.mpa.fallback_to_revision1);
}

TEST(ShippedPersonality, Rev1OnlyResetsOnNewerRevision) {
  auto p = load_shipped("rev1-only");
  EXPECT_EQ(p.mpa.revision, 1);
  EXPECT_EQ(p.mpa.peer_to_peer, PeerToPeer::kOff);
  EXPECT_TRUE(p.mpa.rtr_offer.empty());
  EXPECT_EQ(p.mpa.on_newer_revision, OnNewerRevision::kReset);
}

TEST(ShippedPersonality, NeverRtrAsksForPeerToPeerAndNeverSendsTheRtr) {
  auto p = load_shipped("never-rtr");
  EXPECT_EQ(p.mpa.peer_to_peer, PeerToPeer::kOn);
  EXPECT_FALSE(p.mpa.send_rtr);
  EXPECT_FALSE(p.mpa.rtr_offer.empty());
}

TEST(ShippedPersonality, StrictWantsEverythingAndStrictIrdOrd) {
  auto p = load_shipped("strict");
  EXPECT_EQ(p.mpa.revision, 2);
  EXPECT_EQ(p.mpa.crc, CrcMode::kWant);
  EXPECT_TRUE(p.mpa.markers_wanted);
  EXPECT_TRUE(p.mpa.markers_supported);
  EXPECT_EQ(p.mpa.peer_to_peer, PeerToPeer::kOn);
  EXPECT_EQ(p.mpa.rtr_offer, (RtrSet{.send = true, .write = true, .read = true}));
  EXPECT_TRUE(p.mpa.strict_ird_ord);
}

TEST(ShippedPersonality, EveryFileRoundTripsThroughToJson) {
  std::vector<std::string> problems;
  auto all = list_personalities({kShipped}, &problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  ASSERT_EQ(all.size(), 5u);
  for (const auto& p : all) {
    auto again = parse_personality(to_json(p).dump(), "<round trip>");
    ASSERT_TRUE(again.has_value()) << again.error();
    again->source_path = p.source_path;
    EXPECT_EQ(*again, p) << p.name;
    EXPECT_TRUE(validate(p.mpa).empty()) << p.name;
  }
}

TEST(ListPersonalities, SortedByNameAndEarlierDirectoriesHideLaterOnes) {
  TempDir dir;
  dir.write("siw.json", R"({"name":"siw","description":"mine",
                           "mpa":{"rtr_offer":["write"]}})");
  dir.write("broken.json", "{");
  std::vector<std::string> problems;
  auto all = list_personalities({dir.path(), kShipped}, &problems);
  std::vector<std::string> names;
  for (const auto& p : all) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"cxgb4", "never-rtr", "rev1-only", "siw", "strict"}));
  EXPECT_EQ(all[3].description, "mine");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("broken.json"), std::string::npos) << problems[0];
}

// --- finding them ------------------------------------------------------------------------

TEST(FindPersonality, ByNameInTheSearchDirectories) {
  auto p = find_personality("cxgb4", {kShipped});
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ(p->name, "cxgb4");
}

TEST(FindPersonality, ByPath) {
  TempDir dir;
  auto file = dir.write("custom.json", R"({"mpa":{"revision":1,"peer_to_peer":"off"}})");
  auto p = find_personality(file.string(), {});
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ(p->name, "custom");  // the file stem when "name" is absent
  EXPECT_EQ(p->mpa.revision, 1);
}

TEST(FindPersonality, UnknownNameListsTheKnownOnes) {
  auto p = find_personality("chelsio", {kShipped});
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().find("unknown personality \"chelsio\""), std::string::npos) << p.error();
  EXPECT_NE(p.error().find("cxgb4, never-rtr, rev1-only, siw, strict"), std::string::npos)
      << p.error();
}

TEST(FindPersonality, MissingFileSaysSo) {
  auto p = find_personality("/nonexistent/dir/peer.json", {kShipped});
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error(), "/nonexistent/dir/peer.json: no such personality file");
}

TEST(FindPersonality, EmptyNameIsAnError) {
  EXPECT_FALSE(find_personality("", {kShipped}).has_value());
}

TEST(DefaultPersonalityDirs, EnvironmentDirectoryComesFirst) {
  TempDir dir;
  dir.write("siw.json", R"({"name":"siw","description":"override",
                           "mpa":{"rtr_offer":["read"]}})");
  ::setenv("RDMA_INTEROP_PERSONALITY_DIR", dir.path().c_str(), 1);
  auto dirs = default_personality_dirs();
  ::unsetenv("RDMA_INTEROP_PERSONALITY_DIR");
  ASSERT_FALSE(dirs.empty());
  EXPECT_EQ(dirs.front(), fs::weakly_canonical(dir.path()));
  auto p = find_personality("siw", dirs);
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ(p->description, "override");
  // The source tree's directory is always a fallback in a build tree.
  EXPECT_NE(std::find(dirs.begin(), dirs.end(), fs::weakly_canonical(kShipped)), dirs.end());
}

TEST(ParsePersonality, EveryMpaKeyIsOptionalAndDefaultsToMpaPolicy) {
  auto p = parse_personality(R"({"name": "minimal"})", "<test>");
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ(p->mpa, MpaPolicy{});
  EXPECT_TRUE(p->private_data.empty());
  EXPECT_TRUE(p->description.empty());
}

// --- every error path ----------------------------------------------------------------------

TEST(PersonalityError, InvalidJsonGivesFileAndLine) {
  auto e = parse_error("{\n  \"name\": \"x\",\n  \"mpa\": {\"revision\": 2,,}\n}\n");
  EXPECT_EQ(e.rfind("t.json:3: invalid JSON:", 0), 0u) << e;
}

TEST(PersonalityError, NotAnObject) {
  EXPECT_NE(parse_error("[1, 2]").find("a personality is a JSON object"), std::string::npos);
}

TEST(PersonalityError, UnknownTopLevelKeyNamesKeyAndLine) {
  auto e = parse_error("{\n \"name\": \"x\",\n \"mpaa\": {}\n}");
  EXPECT_EQ(e.rfind("t.json:3: unknown key \"mpaa\"", 0), 0u) << e;
}

TEST(PersonalityError, UnknownMpaKeyNamesKeyAndKnownKeys) {
  auto e = parse_error("{\"name\": \"x\",\n \"mpa\": {\n  \"marker\": true}}");
  EXPECT_EQ(e.rfind("t.json:3: unknown key \"mpa.marker\"", 0), 0u) << e;
  EXPECT_NE(e.find("markers_wanted"), std::string::npos) << e;
}

TEST(PersonalityError, WrongTypes) {
  EXPECT_NE(parse_error(R"({"mpa":{"markers_wanted":"yes"}})")
                .find("\"mpa.markers_wanted\" must be true or false, not a string"),
            std::string::npos);
  EXPECT_NE(
      parse_error(R"({"mpa":{"ird":"16"}})").find("\"mpa.ird\" must be an integer, not a string"),
      std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"ord":1.5}})").find("not a number with a fraction"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"crc":true}})").find("\"mpa.crc\" must be one of want"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"rtr_offer":"read"}})").find("must be an array of RTR types"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"rtr_offer":[1]}})").find("it holds an integer"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"name":7})").find("\"name\" must be a string"), std::string::npos);
  EXPECT_NE(parse_error(R"({"description":[]})").find("\"description\" must be a string"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":[]})").find("\"mpa\" must be an object"), std::string::npos);
  EXPECT_NE(parse_error(R"({"private_data":[1,2]})").find("\"private_data\" must be a string"),
            std::string::npos);
}

TEST(PersonalityError, OutOfRangeValues) {
  auto ird = parse_error(R"({"mpa":{"rtr_offer":["read"],"ird":16384}})");
  EXPECT_NE(ird.find("\"mpa.ird\" is 16384, out of range 0..16383"), std::string::npos) << ird;
  EXPECT_NE(ird.find("14 bits"), std::string::npos) << ird;
  EXPECT_NE(parse_error(R"({"mpa":{"ord":-1}})").find("out of range"), std::string::npos);
  EXPECT_NE(
      parse_error(R"({"mpa":{"revision":3}})").find("\"mpa.revision\" is 3, out of range 1..2"),
      std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"private_data_limit":513}})").find("at most 512"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"rtr_timeout_ms":0}})").find("\"mpa.rtr_timeout_ms\" is 0"),
            std::string::npos);
  EXPECT_NE(
      parse_error(R"({"mpa":{"reply_timeout_ms":18446744073709551615}})").find("out of range"),
      std::string::npos);
}

TEST(PersonalityError, UnknownEnumNames) {
  auto e = parse_error(R"({"mpa":{"peer_to_peer":"sometimes"}})");
  EXPECT_NE(e.find("\"mpa.peer_to_peer\" is \"sometimes\", not one of off | when-asked | on"),
            std::string::npos)
      << e;
  EXPECT_NE(parse_error(R"({"mpa":{"on_newer_revision":"ignore"}})").find("reply | reset"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"rtr_offer":["atomic"]}})")
                .find("holds \"atomic\", not an RTR type (send | write | read)"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"rtr_offer":["read","read"]}})").find("names \"read\" twice"),
            std::string::npos);
}

TEST(PersonalityError, PrivateDataAboveTheLimit) {
  auto e = parse_error(R"({"mpa":{"rtr_offer":["read"],"private_data_limit":4},
                          "private_data":"hello"})");
  EXPECT_NE(e.find("\"private_data\" is 5 octets, above \"mpa.private_data_limit\" (4)"),
            std::string::npos)
      << e;
}

TEST(PersonalityError, PolicyContradictionsFromValidate) {
  auto e = parse_error(R"({"mpa":{"revision":1,"peer_to_peer":"on","rtr_offer":["read"]}})");
  EXPECT_NE(e.find("the \"mpa\" policy is not usable: "), std::string::npos) << e;
  EXPECT_NE(e.find("revision 2"), std::string::npos) << e;
  auto pref = parse_error(R"({"mpa":{"rtr_offer":["read"],"rtr_preference":["write"]}})");
  EXPECT_NE(pref.find("rtr_preference names write"), std::string::npos) << pref;
}

TEST(PersonalityError, BadNames) {
  EXPECT_NE(parse_error(R"({"name":"has space"})").find("letters, digits"), std::string::npos);
  auto missing = parse_personality(R"({"mpa":{}})", "t.json");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error(), "t.json: \"name\" is missing");
}

TEST(PersonalityError, DirectoryIsNotAFile) {
  TempDir dir;
  auto p = load_personality_file(dir.path());
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().find("is a directory"), std::string::npos);
}

// --- Review findings: what the wire can carry, and what an operator file may be ----------

// RFC 5044 s7.1: at most 512 octets of private data; in revision 2 the 4 octets of IRD/ORD
// (RFC 6581 s3) come out of them. A personality that could never send its frame is refused
// when it loads, not reported later as the peer's malformed frame.
TEST(PersonalityError, PrivateDataThatCannotFitARevision2FrameIsRefusedAtLoad) {
  auto json_with = [](int revision, std::size_t octets) {
    return R"({"mpa":{"revision":)" + std::to_string(revision) +
           R"(,"peer_to_peer":"off","private_data_limit":512},"private_data":")" +
           std::string(octets, 'x') + "\"}";
  };
  for (std::size_t octets : {509, 510, 512}) {
    auto e = parse_error(json_with(2, octets));
    EXPECT_NE(e.find("\"private_data\" is " + std::to_string(octets) + " octets"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("508"), std::string::npos) << e;
    EXPECT_NE(e.find("RFC 5044 s7.1"), std::string::npos) << e;
  }
  EXPECT_TRUE(parse_personality(json_with(2, 508), "t.json", "t"));
  // Revision 1 frames carry no IRD/ORD words: all 512 octets are the application's.
  EXPECT_TRUE(parse_personality(json_with(1, 512), "t.json", "t"));
}

// Operator files are opened without blocking (a FIFO with no writer must not hang us),
// must be regular files, and are read up to a cap (64 KiB) so /dev/zero cannot eat memory.
TEST(PersonalityError, FifoIsRefusedWithoutWaitingForAWriter) {
  TempDir dir;
  const auto fifo = dir.path() / "peer.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto loading = std::async(std::launch::async, [&] { return load_personality_file(fifo); });
  if (loading.wait_for(std::chrono::seconds(3)) != std::future_status::ready) {
    // Unblock the reader so the test fails instead of hanging.
    int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    ADD_FAILURE() << "loading a FIFO blocked waiting for a writer";
  }
  auto p = loading.get();
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().find("not a regular file"), std::string::npos) << p.error();
  EXPECT_NE(p.error().find("FIFO"), std::string::npos) << p.error();
}

TEST(PersonalityError, CharacterDevicesAreRefused) {
  auto null = load_personality_file("/dev/null");
  ASSERT_FALSE(null.has_value());
  ASSERT_NE(null.error().find("not a regular file"), std::string::npos) << null.error();
  auto zero = load_personality_file("/dev/zero");
  ASSERT_FALSE(zero.has_value());
  EXPECT_NE(zero.error().find("/dev/zero: not a regular file (a character device)"),
            std::string::npos)
      << zero.error();
}

TEST(PersonalityError, FilesAboveTheSizeCapAreRefused) {
  TempDir dir;
  auto padded = [](std::size_t total) {
    const std::string head = R"({"name":"big","description":")";
    const std::string tail = "\"}";
    return head + std::string(total - head.size() - tail.size(), 'd') + tail;
  };
  auto at_cap = load_personality_file(dir.write("at.json", padded(64 * 1024)));
  EXPECT_TRUE(at_cap.has_value()) << (at_cap ? "" : at_cap.error());
  auto over = load_personality_file(dir.write("over.json", padded(64 * 1024 + 1)));
  ASSERT_FALSE(over.has_value());
  EXPECT_NE(over.error().find("larger than 65536 octets"), std::string::npos) << over.error();
}

// --- JSON out ---------------------------------------------------------------------------

TEST(NegotiatedJson, HasTheRdmaProbeShape) {
  NegotiatedParams n;
  n.revision = 2;
  n.crc = true;
  n.enhanced = true;
  n.peer_to_peer = true;
  n.rtr = RtrType::kRead;
  n.ird = 16;
  n.ord = 16;
  n.peer_ird = 32;
  n.peer_ord = 32;
  EXPECT_EQ(to_json(n).dump(),
            R"({"revision":2,"crc":true,"markers_to_peer":false,"markers_from_peer":false,)"
            R"("enhanced":true,"peer_to_peer":true,"rtr":"read","ird":16,"ord":16,)"
            R"("peer_ird":32,"peer_ord":32})");
  n.rtr.reset();
  EXPECT_TRUE(to_json(n)["rtr"].is_null());
}

}  // namespace
}  // namespace rdma_interop::cm
