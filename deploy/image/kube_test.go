package main

// deploy/kubernetes run by `podman kube play`: the gateway's and the
// worker's containers exactly as their Deployments declare them (args,
// env from the Secret, ConfigMap volumes, ports, security contexts), in
// one pod with a Temporal: the image's own `airlock dev` on another task
// queue, whose frontend listens on the pod's loopback. What podman 4.3
// cannot run of the files is changed here, and named in deploy/README.md.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/testenv"
)

// kubeObjects splits a file of YAML documents.
func kubeObjects(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, doc := range strings.Split(string(b), "\n---\n") {
		if strings.TrimSpace(doc) != "" {
			out = append(out, []byte(doc))
		}
	}
	return out
}

func deployment(t *testing.T, path string) appsv1.Deployment {
	t.Helper()
	for _, doc := range kubeObjects(t, path) {
		var meta struct{ Kind string }
		if err := k8syaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if meta.Kind == "Deployment" {
			var d appsv1.Deployment
			if err := k8syaml.UnmarshalStrict(doc, &d); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return d
		}
	}
	t.Fatalf("%s: no Deployment", path)
	return appsv1.Deployment{}
}

func TestKubePlay(t *testing.T) {
	p := requirePodman(t)
	image := loadedImage(t, p)
	dir := filepath.Join(testenv.RepoRoot(t), "deploy", "kubernetes")

	// The ConfigMaps, pointed at the pod's Temporal and a blob directory
	// (no S3 here), with the test's key in place of ci-agent's placeholder
	// and without Slack (no Slack here: the approver is not run).
	var cms []corev1.ConfigMap
	for _, doc := range kubeObjects(t, filepath.Join(dir, "config.yaml")) {
		var cm corev1.ConfigMap
		if err := k8syaml.UnmarshalStrict(doc, &cm); err != nil {
			t.Fatal(err)
		}
		if cy, ok := cm.Data["airlock.yaml"]; ok {
			for old, repl := range map[string]string{
				"temporal-frontend.temporal.svc.cluster.local:7233":                "127.0.0.1:7233",
				"s3://airlock-blobs?region=us-east-1&prefix=airlock/":              "file:///var/lib/airlock/blobs",
				"0000000000000000000000000000000000000000000000000000000000000000": identity.HashKey(testKey),
				"slack:\n  mode: http": "",
				// podman 4.3 has no subPath: the ConfigMap is mounted as a
				// directory, so the manifests are named by absolute path.
				"- manifests/examples/native.yaml\n  - manifests/site/*.yaml": "- /etc/airlock/manifests/examples/native.yaml\n  - /etc/airlock/manifests/site/*.yaml",
			} {
				if !strings.Contains(cy, old) {
					t.Fatalf("config.yaml's airlock.yaml no longer has %q: update this test", old)
				}
				cy = strings.Replace(cy, old, repl, 1)
			}
			cm.Data["airlock.yaml"] = cy
		}
		cms = append(cms, cm)
	}

	gw := deployment(t, filepath.Join(dir, "gateway.yaml"))
	wk := deployment(t, filepath.Join(dir, "worker.yaml"))
	gwPort, wkPort := testenv.FreePort(t), testenv.FreePort(t)
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: gw.Spec.Template.ObjectMeta,
	}
	pod.Name = fmt.Sprintf("airlock-kubetest-%d", os.Getpid())
	pod.Spec = *gw.Spec.Template.Spec.DeepCopy()
	pod.Spec.Containers = nil
	pod.Spec.Volumes = nil
	for _, role := range []struct {
		name     string
		d        appsv1.Deployment
		hostPort int
	}{{"gateway", gw, gwPort}, {"worker", wk, wkPort}} {
		c := *role.d.Spec.Template.Spec.Containers[0].DeepCopy()
		c.Name, c.Image = role.name, image
		c.ImagePullPolicy = corev1.PullNever
		c.Ports[0].HostPort, c.Ports[0].HostIP = int32(role.hostPort), "127.0.0.1"
		// podman runs the probes' httpGet with curl inside the container,
		// which the image does not have: the test probes them instead.
		c.LivenessProbe, c.ReadinessProbe, c.StartupProbe = nil, nil, nil
		// Kubernetes gives each container its own emptyDir; one pod here
		// holds both roles, so each gets its own volumes.
		for i := range c.VolumeMounts {
			c.VolumeMounts[i].Name = role.name + "-" + c.VolumeMounts[i].Name
			if c.VolumeMounts[i].SubPath == "airlock.yaml" {
				c.VolumeMounts[i].MountPath, c.VolumeMounts[i].SubPath = "/etc/airlock/config", ""
			}
		}
		for i, a := range c.Args {
			if a == "/etc/airlock/airlock.yaml" {
				c.Args[i] = "/etc/airlock/config/airlock.yaml"
			}
		}
		pod.Spec.Containers = append(pod.Spec.Containers, c)
		for _, v := range role.d.Spec.Template.Spec.Volumes {
			v.Name = role.name + "-" + v.Name
			pod.Spec.Volumes = append(pod.Spec.Volumes, v)
		}
	}
	// The Temporal: the image's `airlock dev`, namespace airlock, on a task
	// queue of its own so the Deployments' worker runs the calls.
	pod.Spec.Containers = append([]corev1.Container{{
		Name: "temporal", Image: image, ImagePullPolicy: corev1.PullNever,
		Args:         []string{"dev", "--config", "/etc/airlock/dev/airlock.yaml", "--namespace", "airlock", "--task-queue", "dev-only", "--listen", "127.0.0.1:7500", "--no-ui", "--data-dir", "/var/lib/airlock"},
		VolumeMounts: []corev1.VolumeMount{{Name: "temporal-data", MountPath: "/var/lib/airlock"}, {Name: "temporal-tmp", MountPath: "/tmp"}, {Name: "temporal-config", MountPath: "/etc/airlock/dev", ReadOnly: true}},
	}}, pod.Spec.Containers...)
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: "temporal-data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "temporal-tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "temporal-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "airlock-kubetest-dev"}}}})
	cms = append(cms, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "airlock-kubetest-dev"}, Data: map[string]string{"airlock.yaml": `manifests: [/etc/airlock/manifests/examples/native.yaml]
principals:
  - {name: alice, roles: [all], api_key_sha256: [` + identity.HashKey(testKey) + `]}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
`}})

	var docs []string
	for _, cm := range cms {
		cm.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
		b, err := k8syaml.Marshal(cm)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	b, err := k8syaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, string(b))
	play := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(play, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		t.Fatal(err)
	}

	// The Secret the Deployments read, as a podman secret (what kube
	// play's secretKeyRef looks up).
	// podman 4.3 reads it as a JSON object of base64 values (what
	// map[string][]byte marshals to), not as a Secret object.
	sec, err := json.Marshal(map[string][]byte{
		"session-key":          []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
		"slack-bot-token":      []byte("xoxb-not-used"),
		"slack-signing-secret": []byte("not-used"),
	})
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(secret, sec, 0o600); err != nil {
		t.Fatal(err)
	}
	p.must(t, "secret", "create", "airlock-secrets-kubetest", secret)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = p.run(ctx, "secret", "rm", "airlock-secrets-kubetest")
	})
	// The pod references airlock-secrets: point it at the test's secret.
	yml, _ := os.ReadFile(play)
	yml = []byte(strings.ReplaceAll(string(yml), "name: airlock-secrets\n", "name: airlock-secrets-kubetest\n"))
	if err := os.WriteFile(play, yml, 0o600); err != nil {
		t.Fatal(err)
	}

	// podman keeps each ConfigMap as a named volume: one left by an
	// earlier run would be mounted with its old content.
	cleanup := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, _ = p.run(ctx, "kube", "down", play)
		_, _ = p.run(ctx, "pod", "rm", "-f", pod.Name)
		for _, cm := range cms {
			_, _ = p.run(ctx, "volume", "rm", "-f", cm.Name)
		}
	}
	cleanup()
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range []string{"temporal", "gateway", "worker"} {
				cc := &container{p: p, name: pod.Name + "-" + c}
				t.Logf("%s:\n%s", cc.name, cc.logs())
			}
		}
		cleanup()
	})
	started := time.Now()
	if out, err := p.run(context.Background(), "kube", "play", play); err != nil {
		t.Fatalf("%v\n%s\npod.yaml:\n%s", err, out, yml)
	}

	for _, u := range []string{fmt.Sprintf("http://127.0.0.1:%d", gwPort), fmt.Sprintf("http://127.0.0.1:%d", wkPort)} {
		testenv.WaitFor(t, u+"/readyz in the kube-played pod", 180*time.Second, func() bool {
			code, body, _ := get(u + "/readyz")
			return code == 200 && strings.HasPrefix(body, "ready")
		})
		if code, _, err := get(u + "/healthz"); code != 200 {
			t.Errorf("%s/healthz: %d %v", u, code, err)
		}
	}
	t.Logf("kube play to both roles ready in %s", time.Since(started).Round(time.Millisecond))

	// Every container runs as 65532, not root; the gateway and the worker
	// on a read-only root, as their securityContext says.
	for _, c := range []string{"gateway", "worker"} {
		cc := &container{p: p, name: pod.Name + "-" + c}
		if u := p.must(t, "inspect", "-f", "{{.Config.User}} {{.HostConfig.ReadonlyRootfs}}", cc.name); u != "65532:65532 true" && u != "65532 true" {
			t.Errorf("%s: user and read-only root %q", c, u)
		}
	}

	// An agent's call through the Deployment's gateway, run by its worker.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "kube-test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/mcp", gwPort), HTTPClient: &http.Client{Transport: bearer(testKey)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, tool := range []string{"native__json_query", "site__json_query"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"json": `{"pod":"played"}`, "path": "pod"}})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if res.IsError || structured(t, res)["result"] != "played" {
			t.Errorf("%s through the kube-played gateway and worker: %s", tool, text(res))
		}
	}
}
