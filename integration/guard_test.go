package integration

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/timeline"
	"github.com/airlock-run/airlock/manifests"
)

// exampleGuard is the example airlock.yaml's guard (issue 30 §1), as
// exampleRules reads its rules.
func exampleGuard(t *testing.T) *manifests.Guard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Guard *manifests.Guard `yaml:"guard"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if f.Guard == nil || f.Guard.Results == nil || f.Guard.Results.Secrets != manifests.GuardRedact {
		t.Fatalf("the example airlock.yaml does not redact secrets in results: %+v", f.Guard)
	}
	return f.Guard
}

// TestGuardSecretsOnNPMFilesystem (issue 30 §1): a file holding a real
// RSA private key and an AWS key pair is read through airlock from the
// real filesystem server. With the example configuration's guard
// (redact) the model gets the file with both replaced by markers; a tool
// declared block gets an error result naming the kinds and where; and
// neither the workflow history nor the audit stream holds either secret,
// while airlock audit show's timeline names each finding.
func TestGuardSecretsOnNPMFilesystem(t *testing.T) {
	// Not parallel: it counts aws-access-key under block in the
	// process-wide metric, which TestGuardArgumentsOnNPMFilesystem and
	// TestGuardProgramReturnValue (a program's refused call) also raise.
	// A test that is not parallel runs before the parallel ones start.
	sandbox, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fsm := loadExample(t, "filesystem.yaml", "server-filesystem", []string{sandbox}, nil)
	fsm.GuardDefault = exampleGuard(t).Results.Secrets // as config.Load applies it
	fsm.Tools["read_file"].Guard = &manifests.Guard{Results: &manifests.GuardResults{Secrets: manifests.GuardBlock}}
	// read_text_file (low risk, idempotent) runs on the fast path, in the
	// DecideAndCall local activity; medium risk sends read_file the
	// regular way, through the CallTool activity: both are guarded.
	fsm.Tools["read_file"].Risk = manifests.RiskMedium
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{fsm}, policy: &policy.Config{Rules: exampleRules(t)}, audit: openAudit(t, auditPath)})
	const task = "guard-secrets"
	cs := s.connect(t, map[string]string{gateway.HeaderTask: task})
	waitTools(t, cs, "filesystem__read_text_file", "filesystem__read_file")

	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
	accessKey := "AKIA" + "Z4XQ7LMN2PB3RT6W"                     // assembled: never a literal in the repository
	secretKey := "kQ9v/2Rt8Lm" + "Zp4Xw7Nc1Hy6Ja3Sd5Fg0Bq+Ue8Vi" // 40 characters
	file := filepath.Join(sandbox, "deploy.conf")
	content := "db_host = db.internal\naws_access_key_id = " + accessKey + "\naws_secret_access_key = " + secretKey + "\n\n" + keyPEM + "# end of file\n"
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	// What must appear nowhere: each key, and each line of the PEM body.
	secrets := []string{accessKey, secretKey, "BEGIN RSA PRIVATE KEY"}
	for line := range strings.SplitSeq(keyPEM, "\n") {
		if len(line) == 64 {
			secrets = append(secrets, line)
		}
	}
	redactedBefore := testutil.ToFloat64(metrics.GuardFindings.WithLabelValues("private-key", "redact"))
	blockedBefore := testutil.ToFloat64(metrics.GuardFindings.WithLabelValues("aws-access-key", "block"))

	res := call(t, cs, "filesystem__read_text_file", map[string]any{"path": file}, "")
	got := text(res)
	if res.IsError {
		t.Fatalf("read_text_file: %s", got)
	}
	want := "db_host = db.internal\naws_access_key_id = [REDACTED:aws-access-key]\naws_secret_access_key = [REDACTED:aws-secret-key]\n\n[REDACTED:private-key]\n# end of file\n"
	if got != want {
		t.Fatalf("the model got %q, want %q", got, want)
	}

	res = call(t, cs, "filesystem__read_file", map[string]any{"path": file}, "")
	got = text(res)
	if !res.IsError {
		t.Fatalf("read_file (block) delivered: %s", got)
	}
	for _, w := range []string{"aws-access-key at content[0].text", "aws-secret-key at content[0].text", "private-key at content[0].text", "withheld"} {
		if !strings.Contains(got, w) {
			t.Errorf("the block result lacks %q: %s", w, got)
		}
	}

	// Neither the history (every byte of it: payloads are kept as bytes
	// in the protobuf) nor the audit stream holds a secret.
	hist := fetchHistory(t, s.client, task, "")
	var fast, regular int
	for _, ev := range hist.Events {
		if a := ev.GetMarkerRecordedEventAttributes(); a != nil && a.MarkerName == "LocalActivity" {
			fast++
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.ActivityType.GetName() == api.CallToolName {
			regular++
		}
	}
	if fast == 0 || regular != 1 {
		t.Fatalf("the history has %d local activities and %d CallTool activities; want the fast path and one regular call", fast, regular)
	}
	raw, err := proto.Marshal(hist)
	if err != nil {
		t.Fatal(err)
	}
	audit, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(audit, []byte("read_text_file")) {
		t.Fatalf("the audit stream has no line of the calls:\n%s", audit)
	}
	for _, w := range []string{"private-key at content[0].text: redact", "aws-access-key at structuredContent.content: block"} {
		if !bytes.Contains(audit, []byte(w)) {
			t.Errorf("the audit stream lacks the finding %q:\n%s", w, audit)
		}
	}
	for _, sec := range secrets {
		if bytes.Contains(raw, []byte(sec)) {
			t.Errorf("the workflow history holds %q", sec)
		}
		if bytes.Contains(audit, []byte(sec)) {
			t.Errorf("the audit stream holds %q", sec)
		}
	}
	if !bytes.Contains(raw, []byte("[REDACTED:private-key]")) {
		t.Error("the history lacks the redacted result")
	}

	// airlock audit show names each finding: rule, path, action.
	findings, shown := guardFindings(t, hist)
	// The server sends the text twice, as content and as
	// structuredContent.content: both are inspected.
	var wantF []api.Finding
	for _, action := range []string{"redact", "block"} {
		for _, path := range []string{"content[0].text", "structuredContent.content"} {
			for _, rule := range []string{"aws-access-key", "aws-secret-key", "private-key"} {
				wantF = append(wantF, api.Finding{Rule: rule, Path: path, Action: action})
			}
		}
	}
	if len(findings) != len(wantF) {
		t.Fatalf("timeline findings %v, want %v", findings, wantF)
	}
	for _, f := range wantF {
		found := false
		for _, g := range findings {
			found = found || g == f
		}
		if !found {
			t.Errorf("timeline lacks finding %v (has %v)", f, findings)
		}
	}
	if !strings.Contains(shown, "content guard: aws-access-key in the result at content[0].text") {
		t.Errorf("audit show does not show the findings:\n%s", shown)
	}
	if d := testutil.ToFloat64(metrics.GuardFindings.WithLabelValues("private-key", "redact")) - redactedBefore; d != 2 {
		t.Errorf("airlock_guard_findings_total{rule=private-key,action=redact} rose by %v, want 2 (content and structuredContent)", d)
	}
	if d := testutil.ToFloat64(metrics.GuardFindings.WithLabelValues("aws-access-key", "block")) - blockedBefore; d != 2 {
		t.Errorf("airlock_guard_findings_total{rule=aws-access-key,action=block} rose by %v, want 2", d)
	}
}

// TestGuardSecretsInProgramCalls: a program's calls are guarded like
// direct ones: what the program reads, and so what it returns, holds the
// marker, not the key; audit show names the finding on the program's call.
func TestGuardSecretsInProgramCalls(t *testing.T) {
	t.Parallel()
	sandbox, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fsm := loadExample(t, "filesystem.yaml", "server-filesystem", []string{sandbox}, nil)
	fsm.GuardDefault = exampleGuard(t).Results.Secrets
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{fsm}, policy: &policy.Config{Rules: exampleRules(t)},
		programs: &gateway.ProgramOptions{}})
	const task = "guard-program"
	cs := s.connect(t, map[string]string{gateway.HeaderTask: task})
	waitTools(t, cs, "filesystem__read_text_file", gateway.ToolRunProgram)
	token := "ghp_" + "Q7w2Er9Ty4Ui1Op6As3Df8Gh5Jk0Lz2Xc7Vb" // 36 after the prefix
	file := filepath.Join(sandbox, "ci.conf")
	if err := os.WriteFile(file, []byte("GITHUB_TOKEN="+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, sc := runProgram(t, cs, "def main():\n    return str(filesystem.read_text_file(path="+strconvQuote(file)+"))\n", false, "")
	if res.IsError || sc["outcome"] != "ok" {
		t.Fatalf("program: isError=%v %s", res.IsError, text(res))
	}
	got := mustJSON(t, sc["result"])
	if strings.Contains(got, token) || !strings.Contains(got, "[REDACTED:github-token]") {
		t.Fatalf("the program returned %s", got)
	}
	hist := fetchHistory(t, s.client, task, "")
	raw, err := proto.Marshal(hist)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(token)) {
		t.Error("the workflow history holds the token")
	}
	findings, _ := guardFindings(t, hist)
	if len(findings) != 2 || findings[0] != (api.Finding{Rule: "github-token", Path: "content[0].text", Action: "redact"}) || findings[1].Path != "structuredContent.content" {
		t.Errorf("timeline findings %v, want the program call's github-token", findings)
	}
}

func strconvQuote(s string) string { return strconv.Quote(s) }

// TestGuardPersonalDataOnNPMFilesystem (issue 30 §1, personal data): a
// file holding an e-mail address, a test card number, an IBAN and an
// E.164 phone number is read from the real filesystem server through a
// tool declared personal_data: redact. The model gets markers in their
// place and the rest of the file; the workflow history and the audit
// stream hold none of the values; audit show names each finding. A tool
// with no personal_data (the example's default, off) delivers the file.
func TestGuardPersonalDataOnNPMFilesystem(t *testing.T) {
	t.Parallel()
	sandbox, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fsm := loadExample(t, "filesystem.yaml", "server-filesystem", []string{sandbox}, nil)
	fsm.GuardDefault = exampleGuard(t).Results.Secrets
	if pd := exampleGuard(t).Results.PersonalData; pd != "" && pd != manifests.GuardOff {
		t.Fatalf("the example airlock.yaml guards personal data (%q); it is meant to be off (RATIONALE.md)", pd)
	}
	fsm.Tools["read_text_file"].Guard = &manifests.Guard{Results: &manifests.GuardResults{PersonalData: manifests.GuardRedact}}
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{fsm}, policy: &policy.Config{Rules: exampleRules(t)}, audit: openAudit(t, auditPath)})
	const task = "guard-personal-data"
	cs := s.connect(t, map[string]string{gateway.HeaderTask: task})
	waitTools(t, cs, "filesystem__read_text_file", "filesystem__read_file")

	// Assembled, so that the repository's corpus test does not count them.
	email := "ada.lovelace" + "@example.org"
	card := "4111 1111 " + "1111 1111"
	iban := "GB82 WEST " + "1234 5698 7654 32"
	phone := "+44" + "2079460958"
	file := filepath.Join(sandbox, "customer.txt")
	content := "name: Ada Lovelace\nemail: " + email + "\ncard: " + card + "\niban: " + iban + "\nphone: " + phone + "\norder: 4111111111111112\n"
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(metrics.GuardFindings.WithLabelValues("iban", "redact"))

	res := call(t, cs, "filesystem__read_text_file", map[string]any{"path": file}, "")
	got := text(res)
	want := "name: Ada Lovelace\nemail: [REDACTED:email]\ncard: [REDACTED:payment-card]\niban: [REDACTED:iban]\nphone: [REDACTED:phone]\norder: 4111111111111112\n"
	if res.IsError || got != want {
		t.Fatalf("the model got %q (isError %v), want %q", got, res.IsError, want)
	}
	// read_file declares no personal_data: the example's default, off
	// (in another task, so that this task's history is the guarded one's).
	other := s.connect(t, map[string]string{gateway.HeaderTask: task + "-off"})
	waitTools(t, other, "filesystem__read_file")
	res = call(t, other, "filesystem__read_file", map[string]any{"path": file}, "")
	if got := text(res); res.IsError || !strings.Contains(got, email) || !strings.Contains(got, iban) {
		t.Fatalf("read_file (personal data off) got %q", got)
	}

	hist := fetchHistory(t, s.client, task, "")
	raw, err := proto.Marshal(hist)
	if err != nil {
		t.Fatal(err)
	}
	audit, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte("[REDACTED:iban]")) {
		t.Error("the history lacks the redacted result")
	}
	for _, v := range []string{email, card, iban, phone} {
		if bytes.Contains(raw, []byte(v)) {
			t.Errorf("the workflow history holds %q", v)
		}
		if bytes.Contains(audit, []byte(v)) {
			t.Errorf("the audit stream holds %q", v)
		}
	}
	for _, w := range []string{"email at content[0].text: redact", "payment-card at content[0].text: redact", "iban at structuredContent.content: redact", "phone at content[0].text: redact"} {
		if !bytes.Contains(audit, []byte(w)) {
			t.Errorf("the audit stream lacks the finding %q:\n%s", w, audit)
		}
	}
	_, shown := guardFindings(t, hist)
	for _, rule := range []string{"email", "payment-card", "iban", "phone"} {
		if !strings.Contains(shown, "content guard: "+rule+" in the result at content[0].text") {
			t.Errorf("audit show lacks the %s finding:\n%s", rule, shown)
		}
	}
	if d := testutil.ToFloat64(metrics.GuardFindings.WithLabelValues("iban", "redact")) - before; d != 2 {
		t.Errorf("airlock_guard_findings_total{rule=iban,action=redact} rose by %v, want 2 (content and structuredContent)", d)
	}
}

// guardFindings are the content guard's findings of a task's history, as
// its timeline holds them, and the timeline as airlock audit show renders
// it.
func guardFindings(t *testing.T, hist *historypb.History) ([]api.Finding, string) {
	t.Helper()
	tl, err := timeline.Build(hist, nil)
	if err != nil {
		t.Fatal(err)
	}
	var findings []api.Finding
	for _, c := range tl.Calls {
		findings = append(findings, c.Findings...)
	}
	var out bytes.Buffer
	if err := timeline.Render(&out, tl, nil); err != nil {
		t.Fatal(err)
	}
	return findings, out.String()
}
