// kvtierd's TCP listener as a client sees it: TLS with the server's certificate checked against the
// CA (plain text, an unknown CA or a wrong name fail), mutual TLS (no client certificate or one
// from another CA fails), plain text only on loopback, port 0 with the port in
// <state_dir>/tcp.port, a start that cannot bind failing with tcp.listen named, and the
// configuration errors around it. The certificates are made at run time with the openssl command
// line; without it the tests skip.
#include <arpa/inet.h>
#include <sys/stat.h>

#include <cstdlib>

#include "tests/integration/daemon_fixture.h"

namespace kvtier::integration {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class KvtierdTlsTest : public DaemonFixture {
 protected:
  void SetUp() override {
    DaemonFixture::SetUp();
    if (std::system("command -v openssl > /dev/null 2>&1") != 0) {
      GTEST_SKIP() << "openssl is not on PATH; it makes the test certificates";
    }
    MakeCertificates();
  }

  // A file of the test PKI: ca, server (localhost, 127.0.0.1), client (signed by ca), other-ca
  // and other-client (signed by other-ca), each as NAME.pem and NAME.key.
  std::string Pki(const std::string& name) const { return dir_->File("pki/" + name); }

  void MakeCertificates() {
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    auto ca = [&](const std::string& name) {
      return "openssl req -x509 " + key + " -days 2 -keyout " + name + ".key -out " + name +
             ".pem -subj /CN=kvtier-test-" + name +
             " -addext basicConstraints=critical,CA:TRUE"
             " -addext keyUsage=critical,keyCertSign,cRLSign";
    };
    auto leaf = [&](const std::string& name, const std::string& issuer, const std::string& ext) {
      return "openssl req " + key + " -keyout " + name + ".key -out " + name +
             ".csr -subj /CN=kvtier-test-" + name + " && printf '" + ext + "' > " + name +
             ".ext && openssl x509 -req -days 2 -in " + name + ".csr -CA " + issuer +
             ".pem -CAkey " + issuer + ".key -CAcreateserial -out " + name + ".pem -extfile " +
             name + ".ext";
    };
    const std::string cmd =
        "mkdir -p " + dir_->File("pki") + " && cd " + dir_->File("pki") + " && " + ca("ca") +
        " && " + ca("other-ca") + " && " +
        leaf("server", "ca",
             "subjectAltName=DNS:localhost,IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n") +
        " && " + leaf("client", "ca", "extendedKeyUsage=clientAuth\\n") + " && " +
        leaf("other-client", "other-ca", "extendedKeyUsage=clientAuth\\n");
    std::string out;
    ASSERT_EQ(RunCommand(cmd, &out), 0) << cmd << "\n" << out;
  }

  std::vector<std::string> TlsFlags() const {
    return {"--set=tcp.listen=127.0.0.1:0", "--set=tcp.tls.cert_file=" + Pki("server.pem"),
            "--set=tcp.tls.key_file=" + Pki("server.key")};
  }

  // The port the daemon wrote to <state_dir>/tcp.port (it does so right after it starts serving).
  int TcpPort() {
    const std::string file = dir_->File("state/tcp.port");
    const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(10);
    while (access(file.c_str(), F_OK) != 0 && std::chrono::system_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const int port = std::atoi(ReadFile(file).c_str());
    EXPECT_GT(port, 0) << "no port in " << file << "\n" << Log();
    return port;
  }

  // Client credentials that trust the CA `ca` and, when `client` is given, present client.pem and
  // client.key of that name.
  std::shared_ptr<grpc::ChannelCredentials> Tls(const std::string& ca,
                                                const std::string& client = "") const {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = ReadFile(Pki(ca + ".pem"));
    if (!client.empty()) {
      options.pem_cert_chain = ReadFile(Pki(client + ".pem"));
      options.pem_private_key = ReadFile(Pki(client + ".key"));
    }
    return grpc::SslCredentials(options);
  }

  // Hello on a new channel to 127.0.0.1:port; `server_name` overrides the name the server's
  // certificate is checked against.
  static grpc::Status Hello(int port, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                            const std::string& server_name = "") {
    grpc::ChannelArguments args;
    if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
    auto stub = v1::KvTier::NewStub(
        grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), credentials, args));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::HelloRequest req;
    req.set_client_name("kvtierd-tls-test");
    v1::HelloResponse resp;
    grpc::Status st = stub->Hello(&ctx, req, &resp);
    if (st.ok()) {
      EXPECT_EQ(resp.server_version(), "0.1.0");
    }
    return st;
  }

  std::string Ctl(int port) const {
    return std::string(KVTIERCTL_PATH) +
           " --timeout=10 --address=127.0.0.1:" + std::to_string(port);
  }
};

TEST_F(KvtierdTlsTest, TlsListenerServesClientsThatTrustItsCa) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(TlsFlags()));
  const int port = TcpPort();
  EXPECT_TRUE(Contains(Log(), "listening on tcp 127.0.0.1:" + std::to_string(port) + " (tls)"))
      << Log();

  grpc::Status st = Hello(port, Tls("ca"));
  EXPECT_TRUE(st.ok()) << "TLS with the CA (127.0.0.1 in the certificate): " << st.error_message();
  st = Hello(port, Tls("ca"), "localhost");
  EXPECT_TRUE(st.ok()) << "TLS with the CA, name localhost: " << st.error_message();
  st = Hello(port, grpc::InsecureChannelCredentials());
  EXPECT_FALSE(st.ok()) << "plain text reached the TLS port";
  st = Hello(port, Tls("other-ca"));
  EXPECT_FALSE(st.ok()) << "a client that does not trust the server's CA connected";
  st = Hello(port, Tls("ca"), "kvtier.example.com");
  EXPECT_FALSE(st.ok()) << "the server's certificate passed for a name it does not carry";

  // kvtierctl over TLS; without the CA it must not connect (the system's roots do not know it).
  std::string out;
  EXPECT_EQ(RunCommand(Ctl(port) + " --tls-ca=" + Pki("ca.pem") + " status", &out), 0) << out;
  EXPECT_TRUE(Contains(out, "kvtierd 0.1.0")) << out;
  out.clear();
  EXPECT_EQ(
      RunCommand(Ctl(port) + " --tls-ca=" + Pki("ca.pem") + " --tls-server-name=localhost status",
                 &out),
      0)
      << out;
  out.clear();
  EXPECT_EQ(RunCommand(Ctl(port) + " status", &out), 1) << out;
  out.clear();
  EXPECT_EQ(RunCommand(Ctl(port) + " --insecure status", &out), 1) << out;
  out.clear();
  EXPECT_EQ(RunCommand(Ctl(port) + " --tls-cert=" + Pki("client.pem") + " status", &out), 2)
      << "--tls-cert without --tls-key: " << out;

  EXPECT_EQ(StopDaemon(), 0) << Log();
  EXPECT_NE(access(dir_->File("state/tcp.port").c_str(), F_OK), 0) << "tcp.port left behind";
}

TEST_F(KvtierdTlsTest, ClientCaRequiresAClientCertificateSignedByIt) {
  std::vector<std::string> flags = TlsFlags();
  flags.push_back("--set=tcp.tls.client_ca_file=" + Pki("ca.pem"));
  ASSERT_NO_FATAL_FAILURE(StartDaemon(flags));
  const int port = TcpPort();
  EXPECT_TRUE(Contains(Log(), "(tls, client certificates required)")) << Log();

  grpc::Status st = Hello(port, Tls("ca"));
  EXPECT_FALSE(st.ok()) << "a client without a certificate connected";
  st = Hello(port, Tls("ca", "other-client"));
  EXPECT_FALSE(st.ok()) << "a client certificate from another CA was accepted";
  st = Hello(port, Tls("ca", "client"));
  EXPECT_TRUE(st.ok()) << "the client certificate signed by the client CA: " << st.error_message();

  std::string out;
  const std::string ctl = Ctl(port) + " --tls-ca=" + Pki("ca.pem");
  EXPECT_EQ(RunCommand(ctl + " status", &out), 1) << out;
  out.clear();
  EXPECT_EQ(RunCommand(ctl + " --tls-cert=" + Pki("client.pem") +
                           " --tls-key=" + Pki("client.key") + " status",
                       &out),
            0)
      << out;
}

TEST_F(KvtierdTlsTest, InsecureListenerIsPlainTextOnLoopback) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=tcp.listen=127.0.0.1:0", "--set=tcp.insecure=true"}));
  const int port = TcpPort();
  EXPECT_TRUE(Contains(Log(), "(plain text)")) << Log();
  grpc::Status st = Hello(port, grpc::InsecureChannelCredentials());
  EXPECT_TRUE(st.ok()) << st.error_message();
  st = Hello(port, Tls("ca"));
  EXPECT_FALSE(st.ok()) << "a TLS client connected to a plain-text port";
  std::string out;
  EXPECT_EQ(RunCommand(Ctl(port) + " --insecure status", &out), 0) << out;
}

TEST_F(KvtierdTlsTest, StartFailsNamingTcpListenWhenThePortCannotBeBound) {
  // A port another socket listens on.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string busy = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));

  std::vector<std::string> flags = TlsFlags();
  flags[0] = "--set=tcp.listen=" + busy;
  std::string out;
  EXPECT_EQ(RunKvtierd(flags, &out), 1) << out;
  EXPECT_TRUE(Contains(out, "tcp.listen: cannot listen on " + busy)) << out;
  close(fd);

  // A key that is not the certificate's: named as such, and found before the store opens (the
  // start used to get as far as gRPC, which said only that it could not listen).
  flags = TlsFlags();
  flags.push_back("--set=tcp.tls.key_file=" + Pki("client.key"));
  out.clear();
  EXPECT_EQ(RunKvtierd(flags, &out), 1) << out;
  EXPECT_TRUE(Contains(out, "tcp.tls.key_file " + Pki("client.key") +
                                " is not the private key of the certificate in tcp.tls.cert_file " +
                                Pki("server.pem")))
      << out;
  EXPECT_NE(access(dir_->File("state/index").c_str(), F_OK), 0)
      << "the store was opened before the TLS pair was checked";
}

// --check-config finds what the start would: a key that does not match its certificate, a
// certificate file that holds no certificate OpenSSL can parse, a client CA bundle likewise, and
// a busy port; each problem on a line of its own, all in one run. (It used to load the PEM files
// and say "configuration is valid" to a mismatched pair.)
TEST_F(KvtierdTlsTest, CheckConfigChecksTheTlsPairAndThePorts) {
  std::vector<std::string> flags = TlsFlags();
  flags.push_back("--set=tcp.tls.key_file=" + Pki("client.key"));
  flags.push_back("--check-config");
  std::string out;
  EXPECT_EQ(RunKvtierd(flags, &out), 1) << out;
  EXPECT_TRUE(Contains(out, "kvtierd: tcp.tls.key_file " + Pki("client.key") +
                                " is not the private key of the certificate in tcp.tls.cert_file " +
                                Pki("server.pem") + " (/CN=kvtier-test-server)"))
      << out;
  EXPECT_FALSE(Contains(out, "configuration is valid")) << out;

  // A "certificate" that only looks like one, a client CA likewise, and a busy metrics port.
  std::ofstream(Pki("garbage.pem")) << "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n"
                                       "-----END CERTIFICATE-----\n";
  const int busy = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(busy, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(busy, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(busy, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string busy_address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  flags = TlsFlags();
  flags.push_back("--set=tcp.tls.cert_file=" + Pki("garbage.pem"));
  flags.push_back("--set=tcp.tls.client_ca_file=" + Pki("garbage.pem"));
  flags.push_back("--set=metrics.listen=" + busy_address);
  flags.push_back("--check-config");
  out.clear();
  EXPECT_EQ(RunKvtierd(flags, &out), 1) << out;
  close(busy);
  EXPECT_TRUE(Contains(out, "kvtierd: metrics.listen: cannot listen on " + busy_address)) << out;
  EXPECT_TRUE(Contains(
      out, "kvtierd: tcp.tls.cert_file " + Pki("garbage.pem") + ": certificate 1 does not parse"))
      << out;
  EXPECT_TRUE(Contains(out, "kvtierd: tcp.tls.client_ca_file " + Pki("garbage.pem") +
                                ": certificate 1 does not parse"))
      << out;

  // The good pair passes, with and without a client CA.
  flags = TlsFlags();
  flags.push_back("--check-config");
  out.clear();
  EXPECT_EQ(RunKvtierd(flags, &out), 0) << out;
  flags.push_back("--set=tcp.tls.client_ca_file=" + Pki("ca.pem"));
  out.clear();
  EXPECT_EQ(RunKvtierd(flags, &out), 0) << out;
  EXPECT_NE(access(dir_->File("state").c_str(), F_OK), 0) << "--check-config created state_dir";
}

TEST_F(KvtierdTlsTest, ConfigurationErrorsNameTheField) {
  auto check = [&](std::vector<std::string> flags, std::string* out) {
    flags.push_back("--check-config");
    out->clear();
    return RunKvtierd(flags, out);
  };
  const std::string cert = "--set=tcp.tls.cert_file=" + Pki("server.pem");
  const std::string key = "--set=tcp.tls.key_file=" + Pki("server.key");
  std::string out;
  EXPECT_EQ(check(TlsFlags(), &out), 0) << out;
  EXPECT_EQ(check({"--set=tcp.listen=\"[::1]:0\"", "--set=tcp.insecure=true"}, &out), 0) << out;

  EXPECT_EQ(check({"--set=tcp.listen=127.0.0.1:0"}, &out), 1);
  EXPECT_TRUE(Contains(out, "field 'tcp.listen'") && Contains(out, "tcp.tls.cert_file")) << out;
  EXPECT_EQ(check({"--set=tcp.listen=0.0.0.0:0", "--set=tcp.insecure=true"}, &out), 1);
  EXPECT_TRUE(Contains(out, "field 'tcp.insecure'") && Contains(out, "'0.0.0.0'")) << out;
  EXPECT_EQ(check({"--set=tcp.listen=127.0.0.1:0", "--set=tcp.insecure=true", cert, key}, &out), 1);
  EXPECT_TRUE(Contains(out, "field 'tcp.insecure'")) << out;
  EXPECT_EQ(check({"--set=tcp.listen=127.0.0.1", cert, key}, &out), 1);
  EXPECT_TRUE(Contains(out, "field 'tcp.listen': '127.0.0.1' is not host:port")) << out;
  EXPECT_EQ(check({"--set=tcp.listen=127.0.0.1:65536", cert, key}, &out), 1);
  EXPECT_TRUE(Contains(out, "field 'tcp.listen'")) << out;
  EXPECT_EQ(check({"--set=tcp.listen=127.0.0.1:0", cert}, &out), 1);
  EXPECT_TRUE(Contains(out, "field 'tcp.tls.key_file'")) << out;
  EXPECT_EQ(check({"--set=tcp.listen=127.0.0.1:0", key}, &out), 1);
  EXPECT_TRUE(Contains(out, "field 'tcp.tls.cert_file'")) << out;
  EXPECT_EQ(
      check({"--set=tcp.listen=127.0.0.1:0", "--set=tcp.tls.cert_file=server.pem", key}, &out), 1);
  EXPECT_TRUE(Contains(out, "field 'tcp.tls.cert_file': 'server.pem' is not an absolute path"))
      << out;
  // The files are read at load time: the error names the field, the path and why.
  const std::string missing = Pki("missing.pem");
  EXPECT_EQ(
      check({"--set=tcp.listen=127.0.0.1:0", "--set=tcp.tls.cert_file=" + missing, key}, &out), 1);
  EXPECT_TRUE(Contains(
      out, "field 'tcp.tls.cert_file': cannot open " + missing + ": No such file or directory"))
      << out;
  // A FIFO is refused at once (RunKvtierd's timeout turns a hang into a failure).
  ASSERT_EQ(mkfifo(Pki("fifo.pem").c_str(), 0600), 0);
  EXPECT_EQ(
      check({"--set=tcp.listen=127.0.0.1:0", cert, "--set=tcp.tls.key_file=" + Pki("fifo.pem")},
            &out),
      1);
  EXPECT_TRUE(Contains(out, "field 'tcp.tls.key_file': " + Pki("fifo.pem") +
                                " is a FIFO (named pipe), not a regular file"))
      << out;
  EXPECT_EQ(check({"--set=tcp.listen=127.0.0.1:0", cert, "--set=tcp.tls.key_file=" + Pki("ca.pem")},
                  &out),
            1);
  EXPECT_TRUE(Contains(out, "field 'tcp.tls.key_file'") && Contains(out, "not a PEM private key"))
      << out;
  EXPECT_EQ(check({"--set=tcp.listen=127.0.0.1:0", cert, key,
                   "--set=tcp.tls.client_ca_file=" + Pki("server.key")},
                  &out),
            1);
  EXPECT_TRUE(Contains(out, "field 'tcp.tls.client_ca_file'")) << out;
  EXPECT_EQ(check({"--set=tcp.tls.colour=blue"}, &out), 1);
  EXPECT_TRUE(Contains(out, "unknown field 'tcp.tls.colour'")) << out;

  EXPECT_EQ(check({"--set=server.default_deadline_seconds=0"}, &out), 0) << out;
  EXPECT_EQ(check({"--set=server.default_deadline_seconds=2.5"}, &out), 0) << out;
  EXPECT_EQ(check({"--set=server.default_deadline_seconds=-1"}, &out), 1);
  EXPECT_TRUE(Contains(out, "field 'server.default_deadline_seconds'")) << out;
  EXPECT_EQ(check({"--set=server.default_deadline_seconds=soon"}, &out), 1);
  EXPECT_TRUE(Contains(out, "field 'server.default_deadline_seconds'")) << out;

  // The printed default documents the new fields and loads as it is.
  out.clear();
  EXPECT_EQ(RunCommand(KvtierdPath() + " --print-default-config", &out), 0);
  for (const char* field : {"default_deadline_seconds: 60", "tcp:", "listen: \"\"",
                            "cert_file:", "key_file:", "client_ca_file:", "insecure: false"}) {
    EXPECT_TRUE(Contains(out, field)) << field << " missing from\n" << out;
  }
}

}  // namespace
}  // namespace kvtier::integration
