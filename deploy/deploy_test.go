// Package deploy_test checks the deployment files of deploy/ against each
// other and against the worker: each worker config they carry is loaded with
// the worker's own loader (worker.Load), and the facts that span files (ports,
// grace periods, service names, replica IDs) must agree.
package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/slotcron/slotcron/worker"
)

// registered are the jobs that cmd/worker (the image's binary) registers.
var registered = []string{"lottery", "nap"}

const (
	workerImage = "slotcron/worker:dev"
	redisImage  = "slotcron/redis:7"
	jaegerImage = "slotcron/jaeger:dev"
	configPath  = "/etc/slotcron/config.yaml"
	// stopMargin is what a stop takes past shutdown_grace: the cancelled
	// jobs' records, then up to 5s to close the HTTP server and 5s to flush
	// the spans (worker/main.go).
	stopMargin = 10 * time.Second
)

// workerArgs are the arguments that run the worker on the mounted config.
var workerArgs = []string{"run", "-config", configPath}

// loadConfig loads a worker config with worker.Load, with none of the
// environment overrides set: the files must be right on their own.
func loadConfig(t *testing.T, name string, data []byte) *worker.Config {
	t.Helper()
	for _, env := range []string{worker.ReplicaIDEnv, worker.HTTPListenEnv, worker.PasswordEnv} {
		t.Setenv(env, "") // restored at the end of the test
		os.Unsetenv(env)
	}
	cfg, err := worker.Load(name, data, registered)
	if err != nil {
		t.Fatalf("the worker refuses %s:\n%v", name, err)
	}
	return cfg
}

func listenPort(t *testing.T, cfg *worker.Config) int {
	t.Helper()
	_, port, err := net.SplitHostPort(cfg.HTTP.Listen)
	if err != nil {
		t.Fatalf("http.listen %q: %v", cfg.HTTP.Listen, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("http.listen %q: the port is not a number", cfg.HTTP.Listen)
	}
	return n
}

// hostPort splits a host:port address, failing the test if it isn't one.
func hostPort(t *testing.T, what, addr string) (string, int) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("%s %q: the port is not a number", what, addr)
	}
	return host, n
}

func lotteryJob(t *testing.T, cfg *worker.Config) worker.JobConfig {
	t.Helper()
	for _, j := range cfg.Jobs {
		if j.Name == "lottery" {
			return j
		}
	}
	t.Fatalf("no lottery job in %+v", cfg.Jobs)
	return worker.JobConfig{}
}

// readFile reads a file of deploy/ and checks that it starts with its
// comment header.
func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("# ")) {
		t.Errorf("%s does not start with a comment header", name)
	}
	return b
}

// Kubernetes objects, as far as these checks read them.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"` // ConfigMap
	Spec struct {
		// Deployment
		Replicas *int `yaml:"replicas"`
		Template struct {
			Metadata struct {
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		// Service (and Deployment: matchLabels)
		Selector map[string]any `yaml:"selector"`
		Ports    []struct {
			Name       string    `yaml:"name"`
			Port       int       `yaml:"port"`
			TargetPort yaml.Node `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int64      `yaml:"terminationGracePeriodSeconds"`
	Containers                    []container `yaml:"containers"`
	Volumes                       []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name  string `yaml:"name"`
			Items []struct {
				Key  string `yaml:"key"`
				Path string `yaml:"path"`
			} `yaml:"items"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type container struct {
	Name            string          `yaml:"name"`
	Image           string          `yaml:"image"`
	ImagePullPolicy string          `yaml:"imagePullPolicy"`
	Command         []string        `yaml:"command"`
	Args            []string        `yaml:"args"`
	Ports           []containerPort `yaml:"ports"`
	Env             []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			SecretKeyRef *struct {
				Name     string `yaml:"name"`
				Key      string `yaml:"key"`
				Optional *bool  `yaml:"optional"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
}

type containerPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
}

type probe struct {
	HTTPGet *struct {
		Path string    `yaml:"path"`
		Port yaml.Node `yaml:"port"`
	} `yaml:"httpGet"`
}

// port resolves a probe's or a Service's port, a number or the name of one
// of c's ports.
func (c container) port(t *testing.T, n yaml.Node) int {
	t.Helper()
	if p, err := strconv.Atoi(n.Value); err == nil && n.Tag == "!!int" {
		return p
	}
	for _, p := range c.Ports {
		if p.Name == n.Value {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, n.Value)
	return 0
}

// readK8s reads every object of a multi-document manifest.
func readK8s(t *testing.T, name string) []k8sObject {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, name)))
	var out []k8sObject
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, o)
	}
}

func only(t *testing.T, name, kind string, objs []k8sObject) k8sObject {
	t.Helper()
	var found []k8sObject
	for _, o := range objs {
		if o.Kind == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: want one %s, found %d", name, kind, len(found))
	}
	return found[0]
}

// TestDeployKubernetes: the ConfigMap's config.yaml is a config the worker
// loads, and deployment.yaml and redis.yaml agree with it.
func TestDeployKubernetes(t *testing.T) {
	const dir = "kubernetes"
	cmName := path.Join(dir, "configmap.yaml")
	cm := only(t, cmName, "ConfigMap", readK8s(t, cmName))
	data, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatalf("%s has no key config.yaml: %v", cmName, cm.Data)
	}
	cfg := loadConfig(t, cmName+": config.yaml", []byte(data))
	port := listenPort(t, cfg)

	depName := path.Join(dir, "deployment.yaml")
	dep := only(t, depName, "Deployment", readK8s(t, depName))
	if r := dep.Spec.Replicas; r == nil || *r != 3 {
		t.Errorf("%s: replicas %s, want 3", depName, show(r))
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: want one container, found %d", depName, len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != workerImage || c.ImagePullPolicy != "IfNotPresent" {
		t.Errorf("%s: image %s (pull %s), want %s (IfNotPresent)", depName, c.Image, c.ImagePullPolicy, workerImage)
	}
	if len(c.Command) > 0 || !slices.Equal(c.Args, workerArgs) {
		t.Errorf("%s: command %q args %q, want the image's entrypoint with args %q", depName, c.Command, c.Args, workerArgs)
	}

	// The worker stops within shutdown_grace + stopMargin; Kubernetes kills
	// it at terminationGracePeriodSeconds.
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < cfg.ShutdownGrace+stopMargin {
		t.Errorf("%s: terminationGracePeriodSeconds %s, want at least shutdown_grace %v + %v", depName, show(g), cfg.ShutdownGrace, stopMargin)
	}

	// Probes, container port and scrape annotation: http.listen's port.
	if !slices.ContainsFunc(c.Ports, func(p containerPort) bool { return p.ContainerPort == port }) {
		t.Errorf("%s: no containerPort %d (http.listen %q)", depName, port, cfg.HTTP.Listen)
	}
	for _, p := range []struct {
		name, path string
		probe      *probe
	}{{"readinessProbe", "/readyz", c.ReadinessProbe}, {"livenessProbe", "/healthz", c.LivenessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: no %s.httpGet", depName, p.name)
			continue
		}
		if got := p.probe.HTTPGet.Path; got != p.path {
			t.Errorf("%s: %s path %s, want %s", depName, p.name, got, p.path)
		}
		if got := c.port(t, p.probe.HTTPGet.Port); got != port {
			t.Errorf("%s: %s port %d, want %d (http.listen %q)", depName, p.name, got, port, cfg.HTTP.Listen)
		}
	}
	if a := dep.Spec.Template.Metadata.Annotations["prometheus.io/port"]; a != strconv.Itoa(port) {
		t.Errorf("%s: prometheus.io/port %q, want %d", depName, a, port)
	}

	// Environment: the replica ID is the pod's name; secrets are optional.
	env := map[string]int{}
	for i, e := range c.Env {
		env[e.Name] = i
	}
	if i, ok := env[worker.ReplicaIDEnv]; !ok || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil ||
		c.Env[i].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("%s: %s is not set from the pod's metadata.name", depName, worker.ReplicaIDEnv)
	}
	for _, name := range []string{worker.PasswordEnv, worker.AdminTokenEnv} {
		i, ok := env[name]
		if !ok || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil {
			t.Errorf("%s: %s is not set from a Secret", depName, name)
			continue
		}
		if ref := c.Env[i].ValueFrom.SecretKeyRef; ref.Optional == nil || !*ref.Optional {
			t.Errorf("%s: %s's secretKeyRef %s/%s is not optional: true", depName, name, ref.Name, ref.Key)
		}
	}

	// The file at configPath is the ConfigMap's config.yaml.
	if key := mountedKey(t, c, pod, cm.Metadata.Name); key != "config.yaml" {
		t.Errorf("%s: %s is not the key config.yaml of the ConfigMap %s (found %q)", depName, configPath, cm.Metadata.Name, key)
	}

	// redis.addrs names redis.yaml's Service, which selects its Deployment,
	// whose Redis keeps an append-only file.
	redisName := path.Join(dir, "redis.yaml")
	objs := readK8s(t, redisName)
	svc, rdep := only(t, redisName, "Service", objs), only(t, redisName, "Deployment", objs)
	if len(cfg.Redis.Addrs) != 1 {
		t.Fatalf("%s: redis.addrs %q, want one", cmName, cfg.Redis.Addrs)
	}
	host, rport := hostPort(t, "redis.addrs[0]", cfg.Redis.Addrs[0])
	if host != svc.Metadata.Name {
		t.Errorf("%s: redis.addrs %q: host is not the Service %s of %s", cmName, cfg.Redis.Addrs[0], svc.Metadata.Name, redisName)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != rport {
		t.Errorf("%s: Service %s ports %+v, want %d", redisName, svc.Metadata.Name, svc.Spec.Ports, rport)
	}
	rpod := rdep.Spec.Template.Spec
	if len(rpod.Containers) != 1 {
		t.Fatalf("%s: want one container, found %d", redisName, len(rpod.Containers))
	}
	rc := rpod.Containers[0]
	if len(svc.Spec.Ports) == 1 && rc.port(t, svc.Spec.Ports[0].TargetPort) != 6379 {
		t.Errorf("%s: the Service's targetPort is not the container's 6379", redisName)
	}
	for k, v := range svc.Spec.Selector {
		if rdep.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("%s: the Service selects %s=%v, which the Redis pod lacks (%v)", redisName, k, v, rdep.Spec.Template.Metadata.Labels)
		}
	}
	if len(svc.Spec.Selector) == 0 {
		t.Errorf("%s: the Service selects nothing", redisName)
	}
	if rc.Image != redisImage {
		t.Errorf("%s: image %s, want %s", redisName, rc.Image, redisImage)
	}
	if !hasFlag(slices.Concat(rc.Command, rc.Args), "--appendonly", "yes") {
		t.Errorf("%s: redis-server runs without --appendonly yes: %q %q", redisName, rc.Command, rc.Args)
	}
	// No config file, no password: protected mode would refuse the workers.
	if !hasFlag(slices.Concat(rc.Command, rc.Args), "--protected-mode", "no") {
		t.Errorf("%s: redis-server runs without --protected-mode no, so it refuses clients that are not loopback: %q %q", redisName, rc.Command, rc.Args)
	}
}

// show prints an optional field: its value, or "unset".
func show[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// mountedKey returns the ConfigMap key that c sees at configPath: a
// directory mount of a volume of the ConfigMap cmName (its items map paths
// to keys), or a subPath mount of the file.
func mountedKey(t *testing.T, c container, pod podSpec, cmName string) string {
	t.Helper()
	for _, m := range c.VolumeMounts {
		var file string
		switch {
		case m.MountPath == configPath && m.SubPath != "":
			file = m.SubPath
		case path.Clean(m.MountPath) == path.Dir(configPath) && m.SubPath == "":
			file = path.Base(configPath)
		default:
			continue
		}
		if !m.ReadOnly {
			t.Errorf("the config's mount %s is not readOnly", m.MountPath)
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil || v.ConfigMap.Name != cmName {
				continue
			}
			if len(v.ConfigMap.Items) == 0 {
				return file
			}
			for _, it := range v.ConfigMap.Items {
				if it.Path == file {
					return it.Key
				}
			}
		}
	}
	return ""
}

// hasFlag reports whether args hold flag followed by value.
func hasFlag(args []string, flag, value string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag && args[i+1] == value {
			return true
		}
	}
	return false
}

// composeFile is deploy/compose.yaml, as far as these checks read it.
type composeFile struct {
	Services map[string]struct {
		Image           string            `yaml:"image"`
		Entrypoint      []string          `yaml:"entrypoint"`
		Command         []string          `yaml:"command"`
		Environment     map[string]string `yaml:"environment"`
		Ports           []string          `yaml:"ports"`
		Volumes         []string          `yaml:"volumes"`
		DependsOn       []string          `yaml:"depends_on"`
		StopGracePeriod string            `yaml:"stop_grace_period"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// published parses "host:container" port mappings, where host may be a
// variable with a default, ${NAME:-8081}: it maps the default, and vars
// gets the variable's name for that port.
func published(t *testing.T, service string, ports []string, vars map[int]string) map[int]int {
	t.Helper()
	out := map[int]int{}
	for _, p := range ports {
		host, ctr, ok := strings.Cut(p, ":")
		var name string
		if rest, isVar := strings.CutPrefix(p, "${"); isVar {
			var def string
			name, def, _ = strings.Cut(rest, ":-")
			def, tail, closed := strings.Cut(def, "}")
			host, ctr, ok = def, strings.TrimPrefix(tail, ":"), closed && strings.HasPrefix(tail, ":")
		}
		h, err1 := strconv.Atoi(host)
		c, err2 := strconv.Atoi(ctr)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("compose.yaml: %s: port %q is not HOST:CONTAINER or ${VAR:-HOST}:CONTAINER", service, p)
		}
		out[h] = c
		if name != "" && vars != nil {
			vars[h] = name
		}
	}
	return out
}

// TestDeployCompose: deploy/compose/worker.yaml is a config the worker
// loads, and compose.yaml runs three workers on it against its Redis and
// Jaeger.
func TestDeployCompose(t *testing.T) {
	const cfgName = "compose/worker.yaml"
	cfg := loadConfig(t, cfgName, readFile(t, cfgName))
	port := listenPort(t, cfg)
	var f composeFile
	if err := yaml.Unmarshal(readFile(t, "compose.yaml"), &f); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	byImage := map[string][]string{}
	for name, s := range f.Services {
		byImage[s.Image] = append(byImage[s.Image], name)
	}
	for _, names := range byImage {
		slices.Sort(names)
	}

	// Redis: the service redis.addrs names, with an append-only file on a volume.
	if len(byImage[redisImage]) != 1 {
		t.Fatalf("compose.yaml: want one service of %s, found %q", redisImage, byImage[redisImage])
	}
	redisSvc := byImage[redisImage][0]
	if len(cfg.Redis.Addrs) != 1 {
		t.Fatalf("%s: redis.addrs %q, want one", cfgName, cfg.Redis.Addrs)
	}
	if host, rport := hostPort(t, "redis.addrs[0]", cfg.Redis.Addrs[0]); host != redisSvc || rport != 6379 {
		t.Errorf("%s: redis.addrs %q, want %s:6379 (the compose service)", cfgName, cfg.Redis.Addrs[0], redisSvc)
	}
	rs := f.Services[redisSvc]
	if !hasFlag(slices.Concat(rs.Entrypoint, rs.Command), "--appendonly", "yes") {
		t.Errorf("compose.yaml: %s runs without --appendonly yes: %q %q", redisSvc, rs.Entrypoint, rs.Command)
	}
	if !hasFlag(slices.Concat(rs.Entrypoint, rs.Command), "--protected-mode", "no") {
		t.Errorf("compose.yaml: %s runs without --protected-mode no, so it refuses the workers: %q %q", redisSvc, rs.Entrypoint, rs.Command)
	}
	if !slices.ContainsFunc(rs.Volumes, func(v string) bool {
		vol, _, _ := strings.Cut(v, ":")
		_, declared := f.Volumes[vol]
		return declared && strings.HasPrefix(v, vol+":/data")
	}) || !hasFlag(slices.Concat(rs.Entrypoint, rs.Command), "--dir", "/data") {
		t.Errorf("compose.yaml: %s keeps its data (--dir /data) off a named volume at /data: %q", redisSvc, rs.Volumes)
	}

	// Jaeger: the tracing endpoint's host, its UI where tracing.ui_url points.
	if len(byImage[jaegerImage]) != 1 {
		t.Fatalf("compose.yaml: want one service of %s, found %q", jaegerImage, byImage[jaegerImage])
	}
	jaegerSvc := byImage[jaegerImage][0]
	portVars := map[int]string{}
	jports := published(t, jaegerSvc, f.Services[jaegerSvc].Ports, portVars)
	for _, p := range []int{16686, 4317, 4318} {
		if jports[p] != p {
			t.Errorf("compose.yaml: %s does not publish %d:%d (%q)", jaegerSvc, p, p, f.Services[jaegerSvc].Ports)
		}
	}
	if cfg.Tracing.Exporter != worker.ExporterOTLPGRPC {
		t.Errorf("%s: tracing.exporter %s, want %s", cfgName, cfg.Tracing.Exporter, worker.ExporterOTLPGRPC)
	}
	if host, tport := hostPort(t, "tracing.endpoint", cfg.Tracing.Endpoint); host != jaegerSvc || tport != 4317 {
		t.Errorf("%s: tracing.endpoint %q, want %s:4317", cfgName, cfg.Tracing.Endpoint, jaegerSvc)
	}
	if want := fmt.Sprintf("http://localhost:%d", 16686); strings.TrimSuffix(cfg.Tracing.UIURL, "/") != want {
		t.Errorf("%s: tracing.ui_url %q, want %s (Jaeger's UI as published)", cfgName, cfg.Tracing.UIURL, want)
	}

	// The lottery, every second.
	if s := lotteryJob(t, cfg).Schedule; s != "@every 1s" {
		t.Errorf("%s: the lottery's schedule is %q, want @every 1s", cfgName, s)
	}

	// Three workers on that config, each with its own ID and host port.
	workers := byImage[workerImage]
	if len(workers) != 3 {
		t.Fatalf("compose.yaml: want 3 services of %s, found %q", workerImage, workers)
	}
	ids := map[string]string{}
	hostPorts := map[int]string{}
	for _, name := range workers {
		s := f.Services[name]
		id := s.Environment[worker.ReplicaIDEnv]
		if id == "" {
			t.Errorf("compose.yaml: %s sets no %s", name, worker.ReplicaIDEnv)
		} else if other, dup := ids[id]; dup {
			t.Errorf("compose.yaml: %s and %s share %s=%s", other, name, worker.ReplicaIDEnv, id)
		}
		ids[id] = name
		if len(s.Entrypoint) > 0 || !slices.Equal(s.Command, workerArgs) {
			t.Errorf("compose.yaml: %s: entrypoint %q command %q, want the image's entrypoint with %q", name, s.Entrypoint, s.Command, workerArgs)
		}
		if want := "./" + cfgName + ":" + configPath + ":ro"; !slices.Contains(s.Volumes, want) {
			t.Errorf("compose.yaml: %s does not mount %s (%q)", name, want, s.Volumes)
		}
		ports := published(t, name, s.Ports, portVars)
		if len(ports) != 1 {
			t.Errorf("compose.yaml: %s publishes %q, want one port", name, s.Ports)
		}
		for h, c := range ports {
			if c != port {
				t.Errorf("compose.yaml: %s publishes %d:%d, but the worker listens on %d", name, h, c, port)
			}
			if other, dup := hostPorts[h]; dup {
				t.Errorf("compose.yaml: %s and %s both publish host port %d", other, name, h)
			}
			hostPorts[h] = name
		}
		if !slices.Contains(s.DependsOn, redisSvc) {
			t.Errorf("compose.yaml: %s does not depend on %s (%q)", name, redisSvc, s.DependsOn)
		}
		if g, err := time.ParseDuration(s.StopGracePeriod); err != nil || g < cfg.ShutdownGrace+stopMargin {
			t.Errorf("compose.yaml: %s: stop_grace_period %q, want at least shutdown_grace %v + %v", name, s.StopGracePeriod, cfg.ShutdownGrace, stopMargin)
		}
	}
	for _, p := range []int{8081, 8082, 8083} {
		if _, ok := hostPorts[p]; !ok {
			t.Errorf("compose.yaml: no worker publishes host port %d (%v)", p, hostPorts)
		}
	}

	// Every published port can be moved, through a variable of its own: the
	// stack test moves them all, so it runs beside whatever holds these.
	names := map[string]int{}
	for _, h := range slices.Concat([]int{16686, 4317, 4318}, slices.Collect(maps.Keys(hostPorts))) {
		name := portVars[h]
		if name == "" {
			t.Errorf("compose.yaml: host port %d is fixed; publish it as ${SLOTCRON_..._PORT:-%d}", h, h)
		} else if other, dup := names[name]; dup {
			t.Errorf("compose.yaml: host ports %d and %d share the variable %s", other, h, name)
		}
		names[name] = h
	}
}
