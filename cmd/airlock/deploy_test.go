package main

// The deploy files (deploy/compose, deploy/kubernetes, deploy/systemd) are
// checked against the code they run: every airlock command line in them
// against the command table's flags, every probe against the endpoints the
// roles serve, every configuration they mount loaded as airlock loads it.
// Docker and Kubernetes are not needed: the files are parsed (compose with
// yaml.v3, Kubernetes objects into k8s.io/api's types).

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/blob"
	"github.com/airlock-run/airlock/internal/config"
)

const repoRoot = "../.."

// roleArgs parses an airlock command line (without the program name) with
// the command table, as airlock would, and returns the parsed flags.
func roleArgs(t *testing.T, where string, args []string) (role string, fs *flag.FlagSet) {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("%s: no airlock command", where)
	}
	cmd := find(commands(), args[0])
	if cmd == nil || cmd.Flags == nil {
		t.Fatalf("%s: %q is not an airlock command", where, args[0])
	}
	fs = flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cmd.Flags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		t.Errorf("%s: airlock %s: %v", where, strings.Join(args, " "), err)
	}
	if cmd.NoArgs && fs.NArg() > 0 {
		t.Errorf("%s: airlock %s takes no arguments, got %q", where, args[0], fs.Args())
	}
	return args[0], fs
}

// servedPort is the port a role's HTTP listener (healthz, readyz) is on,
// from its parsed flags.
func servedPort(t *testing.T, where, role string, fs *flag.FlagSet) string {
	t.Helper()
	name := "listen"
	if role == "worker" {
		name = "metrics-listen"
	}
	addr := fs.Lookup(name).Value.String()
	if addr == "" || addr == metricsOff {
		t.Fatalf("%s: airlock %s serves no HTTP listener (--%s %q): the probes have nothing to reach", where, role, name, addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: --%s %q: %v", where, name, addr, err)
	}
	if host == "127.0.0.1" || host == "localhost" {
		t.Errorf("%s: --%s %q listens on loopback only: nothing outside the container reaches it", where, name, addr)
	}
	return port
}

// loadMounted loads a configuration as a container sees it: the image's
// /etc/airlock (manifests/examples/native.yaml, wasm/) with the
// configuration and the site manifests mounted over it.
func loadMounted(t *testing.T, cfg []byte, site map[string][]byte) *config.Snapshot {
	t.Helper()
	etc := t.TempDir()
	mustWrite(t, filepath.Join(etc, "airlock.yaml"), cfg)
	native, err := os.ReadFile(filepath.Join(repoRoot, "manifests", "examples", "native.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(etc, "manifests", "examples", "native.yaml"), native)
	for name, b := range site {
		mustWrite(t, filepath.Join(etc, "manifests", "site", name), b)
	}
	snap, err := config.Load(filepath.Join(etc, "airlock.yaml"))
	if err != nil {
		t.Fatalf("the mounted configuration does not load: %v", err)
	}
	if u := snap.Config.Blobs; u != "" {
		if err := blob.CheckURL(u); err != nil {
			t.Errorf("blobs: %v", err)
		}
	}
	// Modules named by absolute path are the image's: they must be the
	// repository's wasm/ modules (deploy/Dockerfile copies them there).
	for _, m := range snap.Manifests {
		for name, tool := range m.Tools {
			if tool.WASM == nil || !strings.HasPrefix(tool.WASM.Module, "/etc/airlock/wasm/") {
				continue
			}
			if _, err := os.Stat(filepath.Join(repoRoot, "wasm", filepath.Base(tool.WASM.Module))); err != nil {
				t.Errorf("%s: tool %s: module %s is not one the image has (wasm/*.wasm): %v", m.File, name, tool.WASM.Module, err)
			}
		}
	}
	return snap
}

func mustWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// airlockEnv are the environment variables airlock reads (the deploy files
// may set others only for the images that are not airlock).
var airlockEnv = regexp.MustCompile(`^(AIRLOCK_SESSION_KEY|TEMPORAL_ADDRESS|TEMPORAL_NAMESPACE|TEMPORAL_API_KEY|TEMPORAL_TLS\w*|SLACK_BOT_TOKEN|SLACK_SIGNING_SECRET|SLACK_APP_TOKEN|AWS_ACCESS_KEY_ID|AWS_SECRET_ACCESS_KEY|AWS_SESSION_TOKEN|AWS_REGION)$`)

type composeService struct {
	Image           string            `yaml:"image"`
	Command         []string          `yaml:"command"`
	Entrypoint      []string          `yaml:"entrypoint"`
	Environment     map[string]string `yaml:"environment"`
	Volumes         []string          `yaml:"volumes"`
	Ports           []string          `yaml:"ports"`
	DependsOn       dependsOn         `yaml:"depends_on"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
}

// dependsOn is compose's depends_on in either form (a list of names, or a
// map of name to {condition}): the names.
type dependsOn map[string]bool

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOn{}
	if n.Kind == yaml.SequenceNode {
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, name := range names {
			(*d)[name] = true
		}
		return nil
	}
	var m map[string]struct {
		Condition string `yaml:"condition"`
	}
	if err := n.Decode(&m); err != nil {
		return err
	}
	for name := range m {
		(*d)[name] = true
	}
	return nil
}

func TestComposeFile(t *testing.T) {
	dir := filepath.Join(repoRoot, "deploy", "compose")
	b, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]composeService `yaml:"services"`
		Volumes  map[string]any            `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	roles := map[string]int{}
	var gatewayPorts []string
	for name, s := range f.Services {
		for dep := range s.DependsOn {
			if _, ok := f.Services[dep]; !ok {
				t.Errorf("service %s depends on %s, which is not a service", name, dep)
			}
		}
		if !strings.HasPrefix(s.Image, "airlock:") {
			continue
		}
		where := "compose.yaml: service " + name
		role, fs := roleArgs(t, where, s.Command)
		roles[role]++
		for k := range s.Environment {
			if !airlockEnv.MatchString(k) {
				t.Errorf("%s: environment %s is not a variable airlock reads", where, k)
			}
		}
		if fs.Lookup("temporal-address").Value.String() == "" && s.Environment["TEMPORAL_ADDRESS"] == "" {
			t.Errorf("%s: no Temporal address (TEMPORAL_ADDRESS or --temporal-address)", where)
		}
		port := servedPort(t, where, role, fs)
		if role == "gateway" {
			gatewayPorts = append(gatewayPorts, name+":"+port)
		}
		if d := fs.Lookup("drain-timeout"); d != nil {
			grace, err := time.ParseDuration(s.StopGracePeriod)
			if err != nil || grace <= d.Value.(flag.Getter).Get().(time.Duration) {
				t.Errorf("%s: stop_grace_period %q must exceed --drain-timeout %s, or Docker kills it mid-drain", where, s.StopGracePeriod, d.Value)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join(dir, src)); err != nil {
					t.Errorf("%s: volume %s: %v", where, v, err)
				}
			}
		}
	}
	for role, want := range map[string]int{"gateway": 2, "worker": 2, "approver": 1} {
		if roles[role] != want {
			t.Errorf("compose.yaml runs %d airlock %s, want %d", roles[role], role, want)
		}
	}
	for _, svc := range []string{"postgresql", "temporal", "temporal-ui", "temporal-schema", "temporal-setup", "loadbalancer"} {
		if _, ok := f.Services[svc]; !ok {
			t.Errorf("compose.yaml has no %s service", svc)
		}
	}

	// The namespace and the four search attributes, as deploy/README.md
	// registers them.
	setup := strings.Join(f.Services["temporal-setup"].Command, "\n")
	for name, typ := range apiSearchAttributes() {
		if !strings.Contains(setup, name+":"+typ) {
			t.Errorf("compose.yaml temporal-setup does not register %s (%s)", name, typ)
		}
	}

	// The load balancer sends to every gateway, and checks /readyz.
	lb, err := os.ReadFile(filepath.Join(dir, "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*option httpchk GET /readyz$`).Match(lb) {
		t.Error("haproxy.cfg does not check /readyz")
	}
	if regexp.MustCompile(`(?m)^\s*(stick|balance source|hash-type)`).Match(lb) {
		t.Error("haproxy.cfg pins clients to a gateway: any replica serves any request")
	}
	for _, gp := range gatewayPorts {
		if !regexp.MustCompile(`(?m)^\s*server \S+ ` + regexp.QuoteMeta(gp) + `\b`).Match(lb) {
			t.Errorf("haproxy.cfg has no server line for gateway %s", gp)
		}
	}

	// The configuration the containers mount.
	cfg, err := os.ReadFile(filepath.Join(dir, "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	site := map[string][]byte{}
	ms, _ := filepath.Glob(filepath.Join(dir, "manifests", "*.yaml"))
	for _, m := range ms {
		site[filepath.Base(m)], _ = os.ReadFile(m)
	}
	snap := loadMounted(t, cfg, site)
	if !strings.HasPrefix(snap.Config.Blobs, "s3://") {
		t.Errorf("compose airlock.yaml: blobs %q: two workers need a shared store (s3://)", snap.Config.Blobs)
	}
	if snap.Config.Slack == nil {
		t.Error("compose airlock.yaml: no slack block, but compose.yaml runs an approver (which refuses to start without one)")
	}
}

// apiSearchAttributes are airlock's search attributes by name, with the
// type names the Temporal CLI takes.
func apiSearchAttributes() map[string]string {
	out := map[string]string{}
	for name, typ := range api.SearchAttributes() {
		switch typ {
		case enumspb.INDEXED_VALUE_TYPE_KEYWORD:
			out[name] = "Keyword"
		case enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST:
			out[name] = "KeywordList"
		default:
			out[name] = typ.String()
		}
	}
	return out
}

// k8sObjects decodes every document of the files in dir into typed
// objects, refusing fields the types do not have.
func k8sObjects(t *testing.T, dir string) (deps []*appsv1.Deployment, svcs []*corev1.Service, cms map[string]*corev1.ConfigMap, pdbs []*policyv1.PodDisruptionBudget) {
	t.Helper()
	cms = map[string]*corev1.ConfigMap{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, file := range files {
		if filepath.Base(file) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			var meta struct{ Kind string }
			if err := k8syaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s document %d: %v", file, i, err)
			}
			var obj any
			switch meta.Kind {
			case "":
				continue
			case "Deployment":
				d := &appsv1.Deployment{}
				deps, obj = append(deps, d), d
			case "Service":
				s := &corev1.Service{}
				svcs, obj = append(svcs, s), s
			case "ConfigMap":
				c := &corev1.ConfigMap{}
				obj = c
				defer func() { cms[c.Name] = c }()
			case "PodDisruptionBudget":
				p := &policyv1.PodDisruptionBudget{}
				pdbs, obj = append(pdbs, p), p
			default:
				t.Fatalf("%s document %d: kind %s: the test does not know it", file, i, meta.Kind)
			}
			if err := k8syaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s document %d (%s): %v", file, i, meta.Kind, err)
			}
		}
	}
	return deps, svcs, cms, pdbs
}

func TestKubernetesManifests(t *testing.T) {
	dir := filepath.Join(repoRoot, "deploy", "kubernetes")
	deps, svcs, cms, pdbs := k8sObjects(t, dir)
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	kust, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" && !bytes.Contains(kust, []byte("- "+base)) {
			t.Errorf("kustomization.yaml does not list %s", base)
		}
	}

	roles := map[string]bool{}
	for _, d := range deps {
		where := "Deployment " + d.Name
		pod := d.Spec.Template.Spec
		if !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
			t.Errorf("%s: its selector does not select its own pods", where)
		}
		if len(pod.Containers) != 1 {
			t.Fatalf("%s: %d containers, want 1", where, len(pod.Containers))
		}
		c := pod.Containers[0]
		role, fs := roleArgs(t, where, c.Args)
		roles[role] = true
		port := servedPort(t, where, role, fs)

		// Probes reach the endpoints the role serves, on its port.
		for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
			want := "/healthz"
			if name == "readiness" {
				want = "/readyz"
			}
			if p == nil || p.HTTPGet == nil {
				t.Errorf("%s: no %s probe", where, name)
				continue
			}
			if p.HTTPGet.Path != want {
				t.Errorf("%s: %s probe on %s, want %s", where, name, p.HTTPGet.Path, want)
			}
			if got := containerPort(c, p.HTTPGet.Port); got != port {
				t.Errorf("%s: %s probe on port %q (%s), but airlock %s serves on %s", where, name, p.HTTPGet.Port.String(), got, role, port)
			}
		}
		if p := c.ReadinessProbe; p != nil && p.TimeoutSeconds*1000 <= int32(readyTimeout/time.Millisecond) {
			t.Errorf("%s: readiness timeout %ds is not longer than /readyz's own Temporal check (%s)", where, p.TimeoutSeconds, readyTimeout)
		}

		// The grace period covers the preStop pause and the drain.
		drain := fs.Lookup("drain-timeout").Value.(flag.Getter).Get().(time.Duration)
		pause := time.Duration(0)
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			pause = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
		if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= pause+drain {
			t.Errorf("%s: terminationGracePeriodSeconds must exceed the preStop pause (%s) + --drain-timeout (%s)", where, pause, drain)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			t.Errorf("%s: no CPU or memory request", where)
		}
		if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s: not runAsNonRoot", where)
		}

		// Environment: only what airlock reads; secrets named in README.md.
		for _, e := range c.Env {
			if !airlockEnv.MatchString(e.Name) {
				t.Errorf("%s: env %s is not a variable airlock reads", where, e.Name)
			}
			if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
				// The command, continued over its backslash-ended lines.
				cmd := regexp.MustCompile(`kubectl (?:-n \S+ )?create secret generic ` + regexp.QuoteMeta(r.SecretKeyRef.Name) + `(?:[^\n\\]|\\[^\n])*(?:\\\n(?:[^\n\\]|\\[^\n])*)*`).Find(readme)
				if !bytes.Contains(cmd, []byte("--from-literal="+r.SecretKeyRef.Key+"=")) {
					t.Errorf("%s: env %s comes from Secret %s key %s, which deploy/kubernetes/README.md's kubectl create secret does not make", where, e.Name, r.SecretKeyRef.Name, r.SecretKeyRef.Key)
				}
			}
			if r := e.ValueFrom; r != nil && r.ConfigMapKeyRef != nil {
				if cm := cms[r.ConfigMapKeyRef.Name]; cm == nil || cm.Data[r.ConfigMapKeyRef.Key] == "" {
					t.Errorf("%s: env %s: ConfigMap %s has no key %s", where, e.Name, r.ConfigMapKeyRef.Name, r.ConfigMapKeyRef.Key)
				}
			}
		}
		// Mounted ConfigMaps exist and have the keys mounted.
		vols := map[string]corev1.Volume{}
		for _, v := range pod.Volumes {
			vols[v.Name] = v
			if v.ConfigMap != nil && cms[v.ConfigMap.Name] == nil {
				t.Errorf("%s: volume %s: no ConfigMap %s", where, v.Name, v.ConfigMap.Name)
			}
		}
		mountedConfig := false
		for _, m := range c.VolumeMounts {
			v, ok := vols[m.Name]
			if !ok {
				t.Errorf("%s: mount %s: no such volume", where, m.Name)
				continue
			}
			if v.ConfigMap != nil && m.SubPath != "" {
				if cm := cms[v.ConfigMap.Name]; cm != nil && cm.Data[m.SubPath] == "" {
					t.Errorf("%s: mount %s: ConfigMap %s has no key %s", where, m.MountPath, v.ConfigMap.Name, m.SubPath)
				}
			}
			if m.MountPath == fs.Lookup("config").Value.String() {
				mountedConfig = true
			}
		}
		if !mountedConfig {
			t.Errorf("%s: nothing is mounted at --config %s", where, fs.Lookup("config").Value)
		}
		// A PodDisruptionBudget covers it.
		covered := false
		for _, p := range pdbs {
			covered = covered || selects(p.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
		}
		if !covered {
			t.Errorf("%s: no PodDisruptionBudget selects its pods", where)
		}
	}
	for _, role := range []string{"gateway", "worker", "approver"} {
		if !roles[role] {
			t.Errorf("no Deployment runs airlock %s", role)
		}
	}
	for _, s := range svcs {
		var target *appsv1.Deployment
		for _, d := range deps {
			if selects(s.Spec.Selector, d.Spec.Template.Labels) {
				target = d
			}
		}
		if target == nil {
			t.Errorf("Service %s selects no Deployment's pods", s.Name)
			continue
		}
		for _, p := range s.Spec.Ports {
			if containerPort(target.Spec.Template.Spec.Containers[0], p.TargetPort) == "" {
				t.Errorf("Service %s: target port %s is not a port of %s", s.Name, p.TargetPort.String(), target.Name)
			}
		}
	}

	// The mounted configuration loads, with the site manifests.
	cfg, ok := cms["airlock-config"]
	if !ok {
		t.Fatal("no ConfigMap airlock-config")
	}
	site := map[string][]byte{}
	if m := cms["airlock-manifests"]; m != nil {
		for k, v := range m.Data {
			site[k] = []byte(v)
		}
	}
	snap := loadMounted(t, []byte(cfg.Data["airlock.yaml"]), site)
	if !strings.HasPrefix(snap.Config.Blobs, "s3://") {
		t.Errorf("airlock-config: blobs %q: replicas need a shared store (s3://)", snap.Config.Blobs)
	}
}

func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// containerPort resolves a probe's or Service's port (a number or a
// container port's name) to the number, "" if the container has none.
func containerPort(c corev1.Container, p intstr.IntOrString) string {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return fmt.Sprint(cp.ContainerPort)
		}
	}
	return ""
}

// TestSystemdUnits: every unit's ExecStart is a valid airlock command
// line, and every role has a unit.
func TestSystemdUnits(t *testing.T) {
	units, _ := filepath.Glob(filepath.Join(repoRoot, "deploy", "systemd", "*.service"))
	roles := map[string]bool{}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^ExecStart=/usr/local/bin/airlock (.*)$`).FindSubmatch(b)
		if m == nil {
			t.Errorf("%s: no ExecStart=/usr/local/bin/airlock line", u)
			continue
		}
		role, fs := roleArgs(t, filepath.Base(u), strings.Fields(string(m[1])))
		roles[role] = true
		if d := fs.Lookup("drain-timeout"); d != nil {
			stop := regexp.MustCompile(`(?m)^TimeoutStopSec=(\d+)$`).FindSubmatch(b)
			if stop == nil {
				t.Errorf("%s: no TimeoutStopSec", u)
			} else if s, _ := time.ParseDuration(string(stop[1]) + "s"); s <= d.Value.(flag.Getter).Get().(time.Duration) {
				t.Errorf("%s: TimeoutStopSec=%s must exceed --drain-timeout %s", u, stop[1], d.Value)
			}
		}
	}
	for _, role := range []string{"gateway", "worker", "approver"} {
		if !roles[role] {
			t.Errorf("deploy/systemd has no unit for airlock %s", role)
		}
	}
}
