// Personality files: the shipped ones load as the policies they document, and every bad
// input gets its own clear error naming the file (and line).
#include "core/personality/file_loader.h"
#include "core/personality/json_codec.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <string>

namespace rdma_interop::personality {
namespace {

using namespace rdma_interop::cm;

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
  // It takes a Write or a Read from the Request, Write first, but names its own in the Reply
  // (cm.c process_mpa_request, send_mpa_reply); an offer of neither: no peer-to-peer.
  EXPECT_EQ(p.mpa.rtr_accepted, (RtrSet{.send = false, .write = true, .read = true}));
  EXPECT_EQ(p.mpa.rtr_preference, (std::vector{RtrType::kWrite, RtrType::kRead}));
  EXPECT_EQ(p.mpa.rtr_reply, RtrReply::kOwn);
  EXPECT_EQ(p.mpa.no_common_rtr, NoCommonRtr::kDecline);
  EXPECT_TRUE(p.mpa.rtr_in_revision1);
  EXPECT_EQ(p.mpa.read_rtr_sink_stag, 1u);
  EXPECT_EQ(p.mpa.read_rtr_source_stag, 1u);
  EXPECT_EQ(p.mpa.ird, 32);
  EXPECT_EQ(p.mpa.ord, 32);
  EXPECT_FALSE(p.mpa.strict_ird_ord);
  EXPECT_TRUE(p.mpa.fallback_to_revision1);
  EXPECT_EQ(p.mpa.on_newer_revision, OnNewerRevision::kReset);
  EXPECT_FALSE(p.mpa.reject_reserved_bits);
  EXPECT_EQ(p.source_file.substr(0, 34), "drivers/infiniband/hw/cxgb4/cm.c (");
  EXPECT_NE(p.source_version.find("v6.18.44"), std::string::npos);
}

TEST(ShippedPersonality, Cxgb4ModesDifferInTheirRtrTypeRevisionAndReadDepth) {
  auto write = load_shipped("cxgb4-write");
  EXPECT_EQ(write.mpa.rtr_offer, (RtrSet{.write = true}));
  EXPECT_EQ(write.mpa.revision, 2);
  auto rev1 = load_shipped("cxgb4-rev1");
  EXPECT_EQ(rev1.mpa.revision, 1);
  EXPECT_FALSE(rev1.mpa.fallback_to_revision1);
  EXPECT_TRUE(rev1.mpa.rtr_in_revision1);
  EXPECT_EQ(rev1.mpa.on_newer_revision, OnNewerRevision::kReset);
  auto freebsd = load_shipped("freebsd-cxgbe");
  EXPECT_EQ(freebsd.mpa.revision, 1);
  EXPECT_EQ(freebsd.mpa.ird, 8);
  EXPECT_EQ(freebsd.mpa.ord, 8);
  EXPECT_EQ(freebsd.source_file.substr(0, 29), "sys/dev/cxgbe/iw_cxgbe/cm.c (");
  EXPECT_NE(freebsd.source_version.find("FreeBSD"), std::string::npos);
  // Apart from the read depth (not exchanged in revision 1) the two speak the same MPA.
  freebsd.mpa.ird = freebsd.mpa.ord = 32;
  EXPECT_EQ(freebsd.mpa, rev1.mpa);
}

TEST(ShippedPersonality, IrdmaRequiresPeerToPeerAndRefusesWithAReset) {
  auto p = load_shipped("irdma");
  EXPECT_EQ(p.mpa.peer_to_peer, PeerToPeer::kRequired);
  EXPECT_EQ(p.mpa.refuse_with, Refusal::kReset);
  EXPECT_EQ(p.mpa.rtr_offer, (RtrSet{.write = true, .read = true}));
  EXPECT_EQ(p.mpa.rtr_preference, (std::vector{RtrType::kRead, RtrType::kWrite}));
  EXPECT_EQ(p.mpa.rtr_from_reply, RtrFromReply::kPreference);
  EXPECT_EQ(p.mpa.read_rtr_sink_stag, 0xabcdu);
  EXPECT_EQ(p.mpa.read_rtr_source_stag, 0x1234u);
  EXPECT_EQ(p.mpa.ird, 127);
  EXPECT_EQ(p.mpa.ord, 255);
  EXPECT_TRUE(p.mpa.ird_ord_sentinel);
  EXPECT_TRUE(p.mpa.fallback_to_revision1);
  EXPECT_EQ(p.mpa.private_data_limit, 512u);
}

TEST(ShippedPersonality, QedrAnswersEveryCommonRtrType) {
  auto p = load_shipped("qedr");
  EXPECT_EQ(p.mpa.rtr_offer, (RtrSet{.send = true, .write = true, .read = true}));
  EXPECT_EQ(p.mpa.rtr_reply, RtrReply::kAllCommon);
  EXPECT_EQ(p.mpa.no_common_rtr, NoCommonRtr::kOfferAll);
  EXPECT_EQ(p.mpa.ird, 32);
  EXPECT_EQ(p.mpa.ord, 32);
}

TEST(ShippedPersonality, ErdmaSpeaksRevision129AndRefusesCrcAndMarkers) {
  auto p = load_shipped("erdma");
  EXPECT_EQ(p.mpa.revision, 129);
  EXPECT_EQ(p.mpa.crc, CrcMode::kRefuse);
  EXPECT_FALSE(p.mpa.markers_supported);
  EXPECT_EQ(p.mpa.peer_to_peer, PeerToPeer::kOff);
  EXPECT_EQ(p.mpa.on_newer_revision, OnNewerRevision::kClose);
  EXPECT_EQ(p.mpa.on_malformed_frame, OnMalformed::kClose);
  EXPECT_TRUE(p.mpa.echo_reserved_bits);
  EXPECT_EQ(p.mpa.private_data_limit, 256u);
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
  ASSERT_EQ(all.size(), 11u);
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
  EXPECT_EQ(names, (std::vector<std::string>{"cxgb4", "cxgb4-rev1", "cxgb4-write", "erdma",
                                             "freebsd-cxgbe", "irdma", "never-rtr", "qedr",
                                             "rev1-only", "siw", "strict"}));
  EXPECT_EQ(all[9].description, "mine");
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
  EXPECT_NE(p.error().find("cxgb4, cxgb4-rev1, cxgb4-write, erdma, freebsd-cxgbe, irdma, "
                           "never-rtr, qedr, rev1-only, siw, strict"),
            std::string::npos)
      << p.error();
}

TEST(FindPersonality, ByTheNameInsideTheFileAsTheListShowsIt) {
  // A probed peer saved under a file name of its own: `rdma-probe personalities` lists it
  // by its "name", and --personality must find it by that name.
  TempDir dir;
  dir.write("peer.json", R"({"name":"probed-cxgb4","mpa":{"revision":1,"peer_to_peer":"off"}})");
  auto listed = list_personalities({dir.path()});
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name, "probed-cxgb4");
  auto p = find_personality("probed-cxgb4", {dir.path(), kShipped});
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ(p->name, "probed-cxgb4");
  EXPECT_EQ(p->source_path, (dir.path() / "peer.json").string());
  // The file stem still works, and a file named like the name wins over a later directory.
  EXPECT_TRUE(find_personality("peer", {dir.path()}).has_value());
}

TEST(FindPersonality, ANearMissSuggestsTheNearestName) {
  auto typo = find_personality("cxbg4", {kShipped});
  ASSERT_FALSE(typo.has_value());
  EXPECT_NE(typo.error().find("did you mean \"cxgb4\"?"), std::string::npos) << typo.error();
  auto prefix = find_personality("irdm", {kShipped});
  ASSERT_FALSE(prefix.has_value());
  EXPECT_NE(prefix.error().find("did you mean \"irdma\"?"), std::string::npos) << prefix.error();
  auto far = find_personality("mellanox", {kShipped});
  ASSERT_FALSE(far.has_value());
  EXPECT_EQ(far.error().find("did you mean"), std::string::npos) << far.error();
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

TEST(ParsePersonality, NullCountsAsAbsentSoAProbeReportLoads) {
  // rdma-probe writes null for what it could not find out (responder_policy).
  auto p = parse_personality(R"({"name": "probed", "description": null, "source": null,
                                 "mpa": {"revision": 2, "crc": null, "rtr_accepted": null,
                                         "ird": null, "strict_ird_ord": null},
                                 "private_data": null})",
                             "<test>");
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ(p->mpa, MpaPolicy{});
  EXPECT_TRUE(p->private_data.empty());
}

TEST(ParsePersonality, SourceNamesTheFileAndVersionReadFrom) {
  auto p = parse_personality(
      R"j({"name": "x", "source": {"file": "drivers/x/cm.c (f)", "version": "Linux v6.18.44"}})j",
      "<test>");
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ(p->source_file, "drivers/x/cm.c (f)");
  EXPECT_EQ(p->source_version, "Linux v6.18.44");
  auto j = to_json(*p);
  EXPECT_EQ(j["source"]["file"], "drivers/x/cm.c (f)");
  EXPECT_NE(parse_error(R"({"source": {"file": "a", "commit": "b"}})")
                .find("unknown key \"source.commit\""),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"source": "drivers/x/cm.c"})").find("\"source\" must be an object"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"source": {"file": 3}})").find("\"source.file\" must be a string"),
            std::string::npos);
}

TEST(ParsePersonality, EveryPolicyKeyOfIssue21ReadsItsValues) {
  auto p = parse_personality(R"({"name": "every", "mpa": {
      "peer_to_peer": "required", "rtr_offer": ["write", "read"],
      "rtr_accepted": ["send", "read"], "rtr_preference": ["read", "send"],
      "rtr_reply": "all-common", "no_common_rtr": "offer-all", "rtr_check": "any",
      "rtr_from_reply": "preference", "read_rtr_sink_stag": 43981,
      "read_rtr_source_stag": 4294967295, "refuse_zero_stag_read_rtr": true,
      "on_newer_revision": "close", "refuse_with": "reset", "on_malformed_frame": "close",
      "echo_reserved_bits": true, "extension_bits": 12, "ird_ord_sentinel": true}})",
                             "<test>");
  ASSERT_TRUE(p.has_value()) << p.error();
  const MpaPolicy& m = p->mpa;
  EXPECT_EQ(m.peer_to_peer, PeerToPeer::kRequired);
  EXPECT_EQ(m.rtr_accepted, (RtrSet{.send = true, .read = true}));
  EXPECT_EQ(accepted_rtrs(m), (RtrSet{.send = true, .read = true}));
  EXPECT_EQ(m.rtr_reply, RtrReply::kAllCommon);
  EXPECT_EQ(m.no_common_rtr, NoCommonRtr::kOfferAll);
  EXPECT_EQ(m.rtr_check, RtrCheck::kAny);
  EXPECT_EQ(m.rtr_from_reply, RtrFromReply::kPreference);
  EXPECT_EQ(m.read_rtr_sink_stag, 0xabcdu);
  EXPECT_EQ(m.read_rtr_source_stag, 0xffffffffu);
  EXPECT_TRUE(m.refuse_zero_stag_read_rtr);
  EXPECT_EQ(m.on_newer_revision, OnNewerRevision::kClose);
  EXPECT_EQ(m.refuse_with, Refusal::kReset);
  EXPECT_EQ(m.on_malformed_frame, OnMalformed::kClose);
  EXPECT_TRUE(m.echo_reserved_bits);
  EXPECT_EQ(m.extension_bits, 0x0c);
  EXPECT_TRUE(m.ird_ord_sentinel);
  auto again = parse_personality(to_json(*p).dump(), "<round trip>");
  ASSERT_TRUE(again.has_value()) << again.error();
  EXPECT_EQ(*again, *p);
}

TEST(PersonalityError, Issue21KeysRefuseWhatTheyCannotMean) {
  EXPECT_NE(
      parse_error(R"({"mpa":{"rtr_reply":"mine"}})").find("not one of chosen | own | all-common"),
      std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"refuse_with":"rst"}})").find("not one of reject | reset"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"read_rtr_sink_stag":-1}})").find("out of range 0..4294967295"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"extension_bits":3}})").find("only the known vendor bits"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"extension_bits":16}})").find("out of range 0..15"),
            std::string::npos);
  // "own" names the responder's own type: exactly one in rtr_offer.
  EXPECT_NE(parse_error(R"({"mpa":{"rtr_reply":"own","rtr_offer":["write","read"]}})")
                .find("rtr_offer must hold exactly one"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"peer_to_peer":"required","revision":1}})")
                .find("\"required\" needs MPA revision 2"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"revision":129,"peer_to_peer":"on"}})")
                .find("revision 129 (erdma) has no peer-to-peer mode"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"revision":129,"peer_to_peer":"off"}})")
                .find("on_newer_revision must be close or reset"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"mpa":{"revision":7}})").find("129 (erdma's own)"), std::string::npos);
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
  EXPECT_NE(parse_error(R"({"mpa":{"revision":3}})")
                .find("\"mpa.revision\" is 3, not 1 (RFC 5044), 2 (RFC 6581) or 129"),
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

}  // namespace
}  // namespace rdma_interop::personality
