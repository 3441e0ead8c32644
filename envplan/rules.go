package envplan

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/nccldebug"
	"github.com/gorun/gorun/internal/secret"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/internal/wire"
)

// carriedPrefixes and carriedNames select the head's exported variables that
// reach every node in head-node mode. Only variables about the job's
// libraries travel: PATH, LD_LIBRARY_PATH, CUDA_HOME and the like describe
// the head's own installation and would be wrong elsewhere, and the head's
// CUDA_VISIBLE_DEVICES says nothing about another node's GPUs.
var (
	carriedPrefixes = []string{"NCCL_", "GLOO_", "TORCH_", "PYTORCH_"}
	carriedNames    = []string{
		"OMP_NUM_THREADS",
		"CUDA_DEVICE_ORDER",
		"CUDA_DEVICE_MAX_CONNECTIONS",
		"CUDA_LAUNCH_BLOCKING",
		"CUDA_MODULE_LOADING",
		"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", // each node's torchrun prefixes its --tee copies with it, as gorun its lines
	}
)

// leftToNCCL are the NCCL knobs gorun never sets: NCCL picks them from the
// topology it detects, and a fixed value is wrong somewhere (GID tables
// differ per node; NVLS depends on the fabric; the rest are debugging
// switches that NCCL's documentation keeps out of production).
var leftToNCCL = []string{
	"NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL",
	"NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_IB_HCA",
	"NCCL_IB_GID_INDEX", "NCCL_NET_GDR_LEVEL", "NCCL_NVLS_ENABLE",
}

// carried reports whether an exported variable reaches the nodes.
func carried(name string) bool {
	for _, p := range carriedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return slices.Contains(carriedNames, name)
}

// Reasons of the user's variables. The shell form tells them apart: a value
// exported where gorun ran is the running shell's too, one given with
// --env may not be.
const (
	reasonExported     = "exported; torchrun passes it on"
	reasonExportedHead = "exported on the head node"
	reasonEnvFlag      = "--env"
	reasonEnvHead      = "--env NAME: the head's value"
)

// collectUserEnv gathers the user's variables: the exported ones that matter
// to the job, then --env in order (a later --env wins). In local mode
// torchrun inherits the whole environment anyway; the plan lists the same
// set there (plus CUDA_VISIBLE_DEVICES) so gorun's rules can defer to them.
func (b *builder) collectUserEnv() error {
	b.userEnv = map[string]Var{}
	for _, name := range slices.Sorted(maps.Keys(b.spec.Environ)) {
		value := b.spec.Environ[name]
		switch {
		case carried(name):
			reason := reasonExported
			if b.head {
				reason = reasonExportedHead
				b.carried = append(b.carried, name)
			}
			b.userEnv[name] = Var{Value: value, Reason: reason, Source: SourceUser}
		case name == "CUDA_VISIBLE_DEVICES" && !b.head:
			b.userEnv[name] = Var{Value: value, Reason: reasonExported, Source: SourceUser}
		case name == "CUDA_VISIBLE_DEVICES":
			b.note(NoteWarn, "CUDA_VISIBLE_DEVICES=%s on the head node is not carried to the nodes: it names the head's GPUs; use --include/--exclude or --env CUDA_VISIBLE_DEVICES=...", secret.Redact(name, value))
		}
	}
	for _, e := range b.spec.Gorun.Env {
		name, value, ok := strings.Cut(e, "=")
		if !ok && validEnvName(name) {
			// --env NAME: the head's value, which never was on the
			// command line (a token need not be).
			v, set := b.spec.Environ[name]
			if !set {
				return unsetEnvName(name)
			}
			b.userEnv[name] = Var{Value: v, Reason: reasonEnvHead, Source: SourceUser}
			continue
		}
		if !ok || !validEnvName(name) {
			// Only the name is shown: the value may be a secret.
			return &userr.InputError{
				Where:   "--env",
				Problem: fmt.Sprintf("%q is not a variable assignment", name),
				Fix:     "write --env NAME=VALUE, NAME made of letters, digits and _ and not starting with a digit",
			}
		}
		b.userEnv[name] = Var{Value: value, Reason: reasonEnvFlag, Source: SourceUser}
	}
	if b.head {
		what := "none were exported"
		if len(b.carried) > 0 {
			what = strings.Join(b.carried, ", ")
		}
		b.note(NoteInfo, "carried from the head's environment to every node: %s (the rule: NCCL_*, GLOO_*, TORCH_*, PYTORCH_*, %s; anything else needs --env)", what, strings.Join(carriedNames, ", "))
	}
	return nil
}

// unsetEnvName is --env NAME's error where the head has no NAME. A value
// typed after its name without the '=' is a valid name too: a long name
// is not shown, as it may hold a secret.
func unsetEnvName(name string) error {
	if shown := secret.Redact("", name); len(shown) <= 40 {
		return &userr.InputError{
			Where:   "--env " + shown,
			Problem: fmt.Sprintf("%s is not set in this environment, which --env %s takes its value from", shown, shown),
			Fix:     fmt.Sprintf("export %s before running gorun, or write --env %s=VALUE", shown, shown),
		}
	}
	return &userr.InputError{
		Where:   "--env",
		Problem: "the variable it names (not shown: the name is long, and may hold a secret) is not set in this environment, which --env NAME takes its value from",
		Fix:     "export it before running gorun, or write --env NAME=VALUE (a value typed after its name without the '=' reads as a name)",
	}
}

// validEnvName reports whether s is a POSIX shell variable name, the only
// names every shell and `env` accept.
func validEnvName(s string) bool {
	if s == "" || ('0' <= s[0] && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' && !('a' <= c && c <= 'z') && !('A' <= c && c <= 'Z') && !('0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// nodeEnv collects one node's variables while its rules run.
type nodeEnv struct {
	b    *builder
	host string
	env  map[string]Var
}

// decide records a value gorun or torchrun will set, unless the user set
// the variable: the user's value stays, and a contradicted gorun decision is
// remembered for a warning.
func (e nodeEnv) decide(name string, v Var) {
	if u, set := e.b.userEnv[name]; set {
		if v.Source == SourceGorun && u.Value != v.Value {
			o := e.b.override[name]
			if o == nil {
				o = &overridden{gorun: v}
				e.b.override[name] = o
			}
			o.hosts = append(o.hosts, e.host)
		}
		return
	}
	e.env[name] = v
}

// env plans one node's environment: the user's variables, then gorun's
// rules, each only where a fact or the user's request justifies it.
func (b *builder) env(n *NodePlan, h hosts.Host, nproc int, nprocKnown bool, fewestCPUs int) {
	maps.Copy(n.Env, b.userEnv)
	e := nodeEnv{b: b, host: h.Name, env: n.Env}
	f, known := b.facts[h.Name]

	if b.masterAddr.Value != "" {
		e.decide("MASTER_ADDR", b.masterAddr)
	}
	if b.masterPort.Value != "" {
		e.decide("MASTER_PORT", b.masterPort)
	}

	if b.spec.Gorun.FlightRecorder != "" {
		b.flightRecorder(e)
	}

	usesGPUs := h.GPUs != nil || b.cfg.NProcPerNode == "gpu"
	if known {
		usesGPUs = len(f.GPUs) > 0
	}
	if usesGPUs && b.cfg.NProcPerNode != "cpu" {
		e.decide("CUDA_DEVICE_ORDER", Var{
			Value:  "PCI_BUS_ID",
			Reason: "CUDA ordinals then match the nvidia-smi/NVML GPU indices this plan uses",
			Source: SourceGorun,
		})
	}
	if h.GPUs != nil {
		list := joinInts(h.GPUs)
		e.decide("CUDA_VISIBLE_DEVICES", Var{
			Value:  list,
			Reason: fmt.Sprintf("--include/--exclude restricts %s to GPU%s %s", h.Name, plural(len(h.GPUs)), list),
			Source: SourceGorun,
		})
	}

	if b.head && len(b.hosts) > 1 {
		b.interfaceRule(e, n, f)
	}

	b.ompRule(e, nproc, nprocKnown, fewestCPUs)
	b.p2pFaultRule(e, f)
}

// interfaceRule pins NCCL's and Gloo's bootstrap sockets to the interface
// that reaches the master, found by preflight on each node (names may
// differ per node).
func (b *builder) interfaceRule(e nodeEnv, n *NodePlan, f NodeFacts) {
	if f.Interface == "" {
		b.pendingIface = append(b.pendingIface, n.Host)
		return
	}
	target := "MASTER_ADDR " + b.masterAddr.Value
	if b.masterAddr.Value == "" {
		addr, _ := b.address(b.hosts[0].Name)
		target = "node 0's address " + addr
	}
	reason := fmt.Sprintf("%s routes to %s", f.Interface, target)
	if n.NodeRank == 0 {
		reason = fmt.Sprintf("%s holds %s", f.Interface, target)
	}
	// NCCL reads a leading '=' as "exactly this name" (eth1 would also
	// match eth10); Gloo takes plain interface names only.
	e.decide("NCCL_SOCKET_IFNAME", Var{Value: "=" + f.Interface, Reason: reason, Source: SourceGorun})
	e.decide("GLOO_SOCKET_IFNAME", Var{Value: f.Interface, Reason: reason, Source: SourceGorun})
}

// ompRule sizes OpenMP's pool to the CPUs bound to each rank (the smallest
// set, so no rank oversubscribes), or shows torchrun's own default when
// gorun binds nothing.
func (b *builder) ompRule(e nodeEnv, nproc int, nprocKnown bool, fewestCPUs int) {
	switch {
	case fewestCPUs > 0:
		e.decide("OMP_NUM_THREADS", Var{
			Value:  strconv.Itoa(fewestCPUs),
			Reason: "CPUs bound to each rank (the smallest set on this node)",
			Source: SourceGorun,
		})
	case nprocKnown && nproc > 1:
		e.decide("OMP_NUM_THREADS", Var{
			Value:  "1",
			Reason: "torchrun's default when nproc_per_node > 1 and OMP_NUM_THREADS is unset",
			Source: SourceTorchrun,
		})
	}
}

// leftToNCCLNotes says which NCCL knobs gorun leaves alone, and warns about
// debugging knobs the user set.
func (b *builder) leftToNCCLNotes() {
	var left []string
	for _, name := range leftToNCCL {
		u, set := b.userEnv[name]
		switch {
		case !set && b.p2pOff[name]:
			// set by p2pFaultRule on the nodes whose P2P path failed
		case !set:
			left = append(left, name)
		case nccldebug.IsKnob(name):
			b.note(NoteWarn, "%s=%s (%s) is an NCCL debugging knob, not meant for production; kept as set", name, secret.Redact(name, u.Value), u.Reason)
		case name == "NCCL_IB_GID_INDEX":
			b.note(NoteWarn, "NCCL_IB_GID_INDEX=%s (%s) applies one GID index on every node, but GID tables differ per node; NCCL picks RoCE v2 itself (NCCL_IB_ROCE_VERSION_NUM, NCCL_IB_ADDR_FAMILY steer it)", secret.Redact(name, u.Value), u.Reason)
		}
	}
	if len(left) > 0 {
		b.note(NoteInfo, "left to NCCL: %s; NCCL chooses these from the topology it finds (export or --env one to override)", strings.Join(left, ", "))
	}
}

func joinInts(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ",")
}

// FlightRecorderDir is where a run's flight-recorder dumps go on a node,
// before the head gathers them; named by node too, for nodes that share
// /tmp.
func FlightRecorderDir(runID, host string) string {
	if runID == "" {
		runID = "RUN"
	}
	return "/tmp/gorun-flight-recorder-" + runID + "/" + host
}

// flightRecorder turns on PyTorch's NCCL flight recorder (--flight-recorder):
// every rank keeps its last collectives with their Python stacks and writes
// them when NCCL's watchdog times a collective out. Values the user set win.
func (b *builder) flightRecorder(e nodeEnv) {
	dir := FlightRecorderDir(b.spec.RunID, e.host)
	e.decide("TORCH_NCCL_TRACE_BUFFER_SIZE", Var{Value: "2000", Source: SourceGorun,
		Reason: "--flight-recorder: each rank keeps its last 2000 collectives, with their stacks"})
	e.decide("TORCH_NCCL_DUMP_ON_TIMEOUT", Var{Value: "1", Source: SourceGorun,
		Reason: "--flight-recorder: each rank writes them when NCCL's watchdog times a collective out"})
	e.decide("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", Var{Value: dir + "/nccl_trace_rank_", Source: SourceGorun,
		Reason: "--flight-recorder: one file per rank on the node; after a failed attempt gorun gathers them under " + b.spec.Gorun.FlightRecorder})
	e.decide(wire.FlightRecorderDirVar, Var{Value: dir, Source: SourceGorun,
		Reason: "--flight-recorder: made by each worker's supervisor before the worker starts"})
}
