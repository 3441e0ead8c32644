package preflight

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// Bandwidth modes (`gorun preflight --bandwidth MODE`, and
// `--preflight-bandwidth MODE` before a launch).
const (
	BandwidthNode = "node" // every GPU pair, host links, all_reduce on each node
	BandwidthAll  = "all"  // node, then all_reduce between nodes
)

// bandwidthScript is the measurement, run with the interpreter torchrun
// uses; its header documents the output and the test hooks.
//
//go:embed bandwidth.py
var bandwidthScript []byte

// BandwidthScript returns the embedded measurement script.
func BandwidthScript() []byte { return bytes.Clone(bandwidthScript) }

// BandwidthFacts are the figures one node measured, as the script
// reported them, plus what went wrong while it ran.
type BandwidthFacts struct {
	Python string `json:"python"`
	// GPUs is how many GPUs the script saw; NoGPUs is set on a node
	// without any (the GPU steps were skipped, said once).
	GPUs      int                  `json:"gpus"`
	NoGPUs    bool                 `json:"no_gpus,omitempty"`
	Torch     string               `json:"torch,omitempty"`
	NCCL      string               `json:"nccl,omitempty"`
	P2P       []P2PBandwidth       `json:"p2p,omitempty"`
	Host      []HostBandwidth      `json:"host,omitempty"`
	AllReduce []AllReduceBandwidth `json:"allreduce,omitempty"`
	Cross     []CrossBandwidth     `json:"cross,omitempty"`
	// Stalled names the step that ran past its limit (the process group
	// was killed then); Errors the steps that failed and why.
	Stalled []Stall  `json:"stalled,omitempty"`
	Errors  []string `json:"errors,omitempty"`
	Seconds float64  `json:"seconds"` // wall time of the whole measurement
	// Steps is how long each finished step took, in order (the bound on
	// the whole is the sum plus starting Python).
	Steps []StepTime `json:"steps,omitempty"`
	// Hooks are the test hooks that were set (GORUN_BW_TEST_*), so a report
	// made with an injected fault says so.
	Hooks []string `json:"hooks,omitempty"`

	begun float64 // the running step's start, script time
}

// P2PBandwidth is one GPU pair: Src→Dst and Dst→Src copies
// (unidirectional, each measured alone), both
// directions at once (bidirectional, the sum), and a small copy's latency
// (launch included). BadBytes counts bytes of the Src→Dst copy that did
// not match; ReverseBadBytes those of Dst→Src.
type P2PBandwidth struct {
	Src             int     `json:"src"`
	Dst             int     `json:"dst"`
	Bytes           int64   `json:"bytes"`
	PeerAccess      bool    `json:"peer_access"`
	UniGBs          float64 `json:"uni_gbs"`         // Src→Dst
	ReverseUniGBs   float64 `json:"reverse_uni_gbs"` // Dst→Src
	BidirGBs        float64 `json:"bidir_gbs"`
	LatencyUs       float64 `json:"latency_us"`
	BadBytes        int64   `json:"bad_bytes"`
	FirstBad        int64   `json:"first_bad"`
	ReverseBadBytes int64   `json:"reverse_bad_bytes"`
	ReverseFirstBad int64   `json:"reverse_first_bad"`
}

// HostBandwidth is one GPU's host link from pinned memory on one NUMA
// node, with the copying thread on that node's CPUs.
type HostBandwidth struct {
	GPU             int     `json:"gpu"`
	NUMANode        int     `json:"numa_node"`
	Local           bool    `json:"local"`
	CPUs            string  `json:"cpus"`
	Bytes           int64   `json:"bytes"`
	H2DGBs          float64 `json:"h2d_gbs"`
	D2HGBs          float64 `json:"d2h_gbs"`
	BadBytes        int64   `json:"bad_bytes"`         // host→device
	ReverseBadBytes int64   `json:"reverse_bad_bytes"` // device→host
}

// AllReduceBandwidth is one all_reduce size, as nccl-tests defines it:
// AlgBW = bytes / time, BusBW = AlgBW × 2(n−1)/n.
type AllReduceBandwidth struct {
	Ranks     int     `json:"ranks"`
	Bytes     int64   `json:"bytes"`
	Dtype     string  `json:"dtype"`
	TimeUs    float64 `json:"time_us"`
	AlgBW     float64 `json:"algbw_gbs"`
	BusBW     float64 `json:"busbw_gbs"`
	BadValues int64   `json:"bad_values"` // wrong sums in the verifying all_reduce
	NVLS      string  `json:"nvls,omitempty"`
}

// CrossBandwidth is an all_reduce between two nodes (Hosts), one size.
type CrossBandwidth struct {
	Hosts     []string `json:"hosts,omitempty"` // filled in by the head
	Backend   string   `json:"backend"`
	Bytes     int64    `json:"bytes"`
	TimeUs    float64  `json:"time_us"`
	AlgBW     float64  `json:"algbw_gbs"`
	BusBW     float64  `json:"busbw_gbs"`
	BadValues int64    `json:"bad_values"`
	Rank      int      `json:"rank"`
}

// StepTime is one finished measurement step and its duration.
type StepTime struct {
	Step    string  `json:"step"`
	Seconds float64 `json:"seconds"`
}

// BusBW is nccl-tests' all_reduce bus bandwidth for n ranks.
func BusBW(algbw float64, n int) float64 {
	if n < 1 {
		return 0
	}
	return algbw * 2 * float64(n-1) / float64(n)
}

// bandwidthEvent is one line of the script's output.
type bandwidthEvent struct {
	Event string  `json:"event"`
	Step  string  `json:"step"`
	Limit float64 `json:"limit_s"`
	Msg   string  `json:"msg"`
	GPUs  int     `json:"gpus"`
	Torch string  `json:"torch"`
	NCCL  string  `json:"nccl"`
	T     float64 `json:"t"`
}

// apply adds one output line to f; it returns the event for the runner's
// step bookkeeping. Lines that are not JSON are kept as errors.
func (f *BandwidthFacts) apply(line []byte) (bandwidthEvent, error) {
	var ev bandwidthEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		return ev, fmt.Errorf("unreadable line from the measurement: %q", truncate(string(line), 200))
	}
	var err error
	switch ev.Event {
	case "p2p":
		var p P2PBandwidth
		err = json.Unmarshal(line, &p)
		f.P2P = append(f.P2P, p)
	case "host":
		var h HostBandwidth
		err = json.Unmarshal(line, &h)
		f.Host = append(f.Host, h)
	case "allreduce":
		var a AllReduceBandwidth
		err = json.Unmarshal(line, &a)
		f.AllReduce = append(f.AllReduce, a)
	case "cross":
		var c CrossBandwidth
		err = json.Unmarshal(line, &c)
		f.Cross = append(f.Cross, c)
	case "note":
		if ev.Torch != "" {
			f.Torch, f.NCCL = ev.Torch, ev.NCCL
		}
		if ev.GPUs > 0 {
			f.GPUs = ev.GPUs
		}
		if strings.HasPrefix(ev.Msg, "no GPUs") {
			f.NoGPUs = true
		}
	case "begin":
		f.begun = ev.T
	case "end":
		f.Steps = append(f.Steps, StepTime{Step: ev.Step, Seconds: math.Round((ev.T-f.begun)*1000) / 1000})
	case "error":
		f.Errors = append(f.Errors, fmt.Sprintf("step %q: %s", ev.Step, ev.Msg))
	case "stalled":
		// The script's own watchdog: gorun normally kills first.
		if !stalledAlready(f, ev.Step) {
			f.Stalled = append(f.Stalled, Stall{Step: ev.Step})
		}
	}
	return ev, err
}

func stalledAlready(f *BandwidthFacts, step string) bool {
	for _, s := range f.Stalled {
		if s.Step == step {
			return true
		}
	}
	return false
}

// ParseBandwidthOutput reads a finished measurement's output (tests, and
// outputs saved by hand).
func ParseBandwidthOutput(r io.Reader) (BandwidthFacts, error) {
	var f BandwidthFacts
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		if _, err := f.apply(sc.Bytes()); err != nil {
			f.Errors = append(f.Errors, err.Error())
		}
	}
	return f, sc.Err()
}

// stepGrace is how long past its limit a step may run before gorun kills
// the measurement (the script's own watchdog waits a second).
const stepGrace = 500 * time.Millisecond

// runSteps runs argv in a process group of its own and reads its events as
// they come. A step still running past its limit (plus stepGrace) is a
// stall: the whole group is killed, so a copy stuck in the driver cannot
// hold preflight. ctx ending kills it too, recorded against the step then
// running.
func runSteps(ctx context.Context, argv, env []string) BandwidthFacts {
	start := time.Now()
	var f BandwidthFacts
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A worker that outlived the script (in a group of its own, say) keeps
	// stderr open; Wait then gives up on the copy instead of waiting.
	cmd.WaitDelay = 2 * time.Second
	stderr := &wire.Tail{Max: 4096}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		f.Errors = append(f.Errors, err.Error())
		return f
	}
	if err := cmd.Start(); err != nil {
		f.Errors = append(f.Errors, fmt.Sprintf("start %s: %v", argv[0], err))
		return f
	}
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			lines <- bytes.Clone(sc.Bytes())
		}
	}()
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var (
		step   string
		limit  float64
		timer  *time.Timer
		expire <-chan time.Time
		killed bool
	)
	stop := func() {
		if timer != nil {
			timer.Stop()
		}
		expire = nil
	}
loop:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break loop
			}
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			ev, err := f.apply(line)
			if err != nil {
				f.Errors = append(f.Errors, err.Error())
				continue
			}
			switch ev.Event {
			case "begin":
				stop()
				step, limit = ev.Step, ev.Limit
				if limit > 0 {
					timer = time.NewTimer(time.Duration(limit*float64(time.Second)) + stepGrace)
					expire = timer.C
				}
			case "end":
				stop()
				step = ""
			}
		case <-expire:
			kill()
			killed = true
			f.Stalled = append(f.Stalled, Stall{Step: step, Seconds: limit})
			expire = nil
		case <-ctx.Done():
			kill()
			killed = true
			if step != "" && !stalledAlready(&f, step) {
				f.Stalled = append(f.Stalled, Stall{Step: step, Seconds: time.Since(start).Seconds()})
			} else if step == "" {
				f.Errors = append(f.Errors, "measurement stopped: "+ctx.Err().Error())
			}
			break loop
		}
	}
	stop()
	if killed {
		// Drain what is left so the reader goroutine ends.
		go func() {
			for range lines {
			}
		}()
	}
	werr := cmd.Wait()
	if werr != nil && !killed && len(f.Stalled) == 0 {
		msg := fmt.Sprintf("%s exited: %v", argv[0], werr)
		if t := strings.TrimSpace(stderr.String()); t != "" {
			msg += ": " + lastLine([]byte(t))
		}
		f.Errors = append(f.Errors, msg)
	}
	f.Seconds = time.Since(start).Seconds()
	return f
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// BandwidthOptions say how to run the measurement on this node.
type BandwidthOptions struct {
	Python  string   // the interpreter torchrun uses
	Environ []string // the node's environment; test hooks come from it
	// PairBytes and HostBytes override the copy sizes (tests); zero keeps
	// the script's 256 MiB.
	PairBytes, HostBytes int64
	// NoAllReduce skips the NCCL step (tests on a CPU-less CI have no NCCL
	// anyway).
	NoAllReduce bool
}

// MeasureNode runs the embedded script in node mode: every GPU pair, each
// GPU's host link, all_reduce over the node's GPUs. It never fails as a
// whole; problems are in the facts.
func MeasureNode(ctx context.Context, o BandwidthOptions) BandwidthFacts {
	args := []string{"node"}
	if o.PairBytes > 0 {
		args = append(args, "--p2p-bytes", strconv.FormatInt(o.PairBytes, 10))
	}
	if o.HostBytes > 0 {
		args = append(args, "--host-bytes", strconv.FormatInt(o.HostBytes, 10))
	}
	if o.NoAllReduce {
		args = append(args, "--no-allreduce")
	}
	return runScript(ctx, o, args)
}

// PairRequest asks one node for its side of an all_reduce with another
// node; it travels as JSON to wire.BandwidthCommand.
type PairRequest struct {
	Torchrun string `json:"torchrun"` // how torchrun starts: its Python runs the script
	Rank     int    `json:"rank"`
	Master   string `json:"master"`            // host:port rank 0 listens on
	Backend  string `json:"backend,omitempty"` // gloo or nccl; "" picks nccl where CUDA works
	// Ifname is the interface the node reaches the other over; it becomes
	// GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME unless the node sets them.
	Ifname        string  `json:"ifname,omitempty"`
	BudgetSeconds float64 `json:"budget_s"` // time for the sizes after init
	LimitSeconds  float64 `json:"limit_s"`  // each step's limit
}

// MeasurePair runs this node's side of an all_reduce with one other node.
func MeasurePair(ctx context.Context, o BandwidthOptions, req PairRequest) BandwidthFacts {
	args := []string{"cross", "--rank", strconv.Itoa(req.Rank), "--world", "2", "--master", req.Master,
		"--budget", strconv.FormatFloat(req.BudgetSeconds, 'f', -1, 64),
		"--limit", strconv.FormatFloat(req.LimitSeconds, 'f', -1, 64)}
	if req.Backend != "" {
		args = append(args, "--backend", req.Backend)
	}
	env := o.Environ
	if req.Ifname != "" {
		env = withDefault(env, "GLOO_SOCKET_IFNAME", req.Ifname)
		env = withDefault(env, "NCCL_SOCKET_IFNAME", "="+req.Ifname)
	}
	o.Environ = env
	return runScript(ctx, o, args)
}

// runScript writes the script to a private temporary file (spawned workers
// re-run it by path) and runs it.
func runScript(ctx context.Context, o BandwidthOptions, args []string) BandwidthFacts {
	python := o.Python
	if python == "" {
		python = "python3"
	}
	file, err := os.CreateTemp("", "gorun-bandwidth-*.py")
	if err != nil {
		return BandwidthFacts{Python: python, Errors: []string{err.Error()}}
	}
	defer os.Remove(file.Name())
	if _, err := file.Write(bandwidthScript); err != nil {
		file.Close()
		return BandwidthFacts{Python: python, Errors: []string{err.Error()}}
	}
	file.Close()
	env := withDefault(o.Environ, "CUDA_DEVICE_ORDER", "PCI_BUS_ID") // ordinals = NVML indexes
	env = withDefault(env, "PYTHONUNBUFFERED", "1")
	f := runSteps(ctx, append([]string{python, file.Name()}, args...), env)
	f.Python = python
	for _, kv := range env {
		if strings.HasPrefix(kv, "GORUN_BW_TEST_") {
			f.Hooks = append(f.Hooks, kv)
		}
	}
	return f
}

// withDefault adds name=value to env unless name is set there.
func withDefault(env []string, name, value string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return env
		}
	}
	return append(append([]string{}, env...), name+"="+value)
}
