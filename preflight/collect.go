package preflight

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gorun/gorun/internal/lazyre"
)

// CommandRunner runs a program on the node and returns its standard output.
type CommandRunner func(ctx context.Context, name string, args ...string) ([]byte, error)

// Sources are the side effects Collect may use. internal/node fills them; tests pass
// mocks and testdata trees. A nil field means "not available": that part of
// the facts stays empty.
type Sources struct {
	// NVML is the library handle (nvml.New() in internal/node); nil when this binary
	// was built without cgo or NVML is not wanted.
	NVML nvml.Interface
	// Root is the filesystem root procfs, sysfs and /dev are read below:
	// "/" on a node, a testdata tree in tests. Empty means "/".
	Root string
	// Run runs nvidia-smi for the fallback collector when NVML gives no
	// facts; nil disables the fallback.
	Run CommandRunner
	// Environ is the node's environment ("K=V"); only job-shaping
	// variables are kept (see Facts.Env).
	Environ []string
	// Now is the clock (time.Now on a node).
	Now func() time.Time
	// Interfaces lists network interfaces (HostInterfaces on a node).
	Interfaces func() ([]Interface, error)
	// Route finds the way to a target (HostRoute on a node).
	Route func(ctx context.Context, target string, ifs []Interface) Route
	// Torch reads the torch build's version facts without importing torch.
	Torch func(ctx context.Context) TorchFacts
}

// CollectOptions say what to collect beyond the node itself.
type CollectOptions struct {
	// Host is the name the head uses for the node; it becomes Facts.Host.
	Host string
	// RouteTarget is the address (host or host:port) whose route is
	// reported, normally MASTER_ADDR; empty skips the route.
	RouteTarget string
	// ProbePort, when set, is a TCP port known to listen on RouteTarget
	// (node 0's sshd): a real connection is opened to it from the route's
	// source address, so the interface is confirmed, not just looked up.
	ProbePort int
	// Script is the training script to hash (Facts.ScriptSHA256); empty
	// skips it.
	Script string
	// StepTimeout bounds each step that can wedge (NVML, nvidia-smi, the
	// torch probe, the route, the script): a step past it is left behind
	// and named in Facts.Stalled. Zero means DefaultStepTimeout.
	StepTimeout time.Duration
}

// DefaultStepTimeout is how long one collector step may take. Every step is
// well under a second on a healthy node; a GPU that fell off the bus can
// hold an NVML call for minutes.
const DefaultStepTimeout = 20 * time.Second

// within runs step under a time limit. step gets a ctx that ends at the
// limit, so the commands it runs are killed then; a call that takes no ctx
// (NVML's, inside the driver) cannot be stopped, so within stops waiting
// for it and records the stall. step must write only to what it owns until
// it returns: within's caller reads it only when within reports true.
func within(ctx context.Context, limit time.Duration, name string, f *Facts, step func(ctx context.Context)) bool {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		step(ctx)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		f.Stalled = append(f.Stalled, Stall{Step: name, Seconds: limit.Seconds()})
		return false
	}
}

// Collect gathers one node's facts. It never fails as a whole: what could
// not be learned is left empty and explained in Facts.Errors or
// Facts.Driver.NVMLError, and the checks turn that into findings.
func Collect(ctx context.Context, src Sources, opts CollectOptions) Facts {
	root := src.Root
	if root == "" {
		root = "/"
	}
	r := sysReader{root: root}
	f := Facts{Host: opts.Host}
	limit := opts.StepTimeout
	if limit <= 0 {
		limit = DefaultStepTimeout
	}
	// Finding torch starts an interpreter, and NVML's init takes tens of
	// milliseconds in the driver: do them side by side.
	torch := make(chan TorchFacts, 1)
	torchCtx, stopTorch := context.WithTimeout(ctx, limit)
	defer stopTorch()
	if src.Torch != nil {
		go func() { torch <- src.Torch(torchCtx) }()
	} else {
		torch <- TorchFacts{}
	}
	if src.Now != nil {
		f.Time = src.Now().UTC()
	}
	collectSystem(r, &f)
	f.Env = envFacts(src.Environ)

	nvmlOK := false
	if src.NVML != nil {
		// The step fills a copy; its own slices, so a step left behind
		// never writes into f.
		g := f
		g.Errors = slices.Clip(f.Errors)
		var ok bool
		if within(ctx, limit, "nvml", &f, func(context.Context) { ok = collectNVML(src.NVML, &g) }) {
			f, nvmlOK = g, ok
		}
		if nvmlOK {
			f.Source = "nvml"
		}
	} else {
		f.Driver.NVMLError = "NVML not available in this build"
	}
	if !nvmlOK && src.Run != nil && ctx.Err() == nil && len(f.Stalled) == 0 {
		g := f
		g.Errors = slices.Clip(f.Errors)
		var err error
		if within(ctx, limit, "nvidia-smi", &f, func(ctx context.Context) { err = collectNvidiaSMI(ctx, src.Run, &g) }) {
			f = g
			switch {
			case errors.Is(err, exec.ErrNotFound) && !f.Driver.Loaded:
				// No driver and no nvidia-smi: a CPU node, reported once by the checks.
			case err != nil:
				f.Errors = append(f.Errors, fmt.Sprintf("nvidia-smi fallback: %v", err))
			default:
				f.Source = "nvidia-smi"
			}
		}
	}
	gpuLocality(r, f.GPUs)

	rdma, err := collectRDMA(r)
	if err != nil {
		f.Errors = append(f.Errors, err.Error())
	}
	f.RDMA = rdma

	if src.Interfaces != nil {
		ifs, err := src.Interfaces()
		if err != nil {
			f.Errors = append(f.Errors, err.Error())
		}
		f.Interfaces = ifs
		if opts.RouteTarget != "" && src.Route != nil {
			var rt Route
			if within(ctx, limit, "route", &f, func(ctx context.Context) {
				rt = src.Route(ctx, opts.RouteTarget, ifs)
				if opts.ProbePort > 0 && rt.Err == "" {
					probeRoute(ctx, &rt, opts.ProbePort)
				}
			}) {
				f.Route = &rt
			}
		}
	}
	select {
	case f.Torch = <-torch:
	case <-torchCtx.Done():
		f.Stalled = append(f.Stalled, Stall{Step: "torch", Seconds: limit.Seconds()})
	}
	if opts.Script != "" {
		var sum string
		var err error
		if within(ctx, limit, "script", &f, func(context.Context) { sum, err = fileSHA256(opts.Script) }) {
			switch {
			case errors.Is(err, fs.ErrNotExist):
				f.ScriptMissing = opts.Script
			case err != nil:
				f.Errors = append(f.Errors, fmt.Sprintf("hash training script: %v", err))
			}
			f.ScriptSHA256 = sum
		}
	}
	return f
}

// collectNvidiaSMI fills GPU facts from nvidia-smi when NVML cannot be used
// by this binary (no cgo, static build) but the driver's own tool works.
func collectNvidiaSMI(ctx context.Context, run CommandRunner, f *Facts) error {
	out, err := run(ctx, "nvidia-smi", QueryGPUArgs()...)
	if err != nil {
		return fmt.Errorf("nvidia-smi %s: %w", QueryGPUArgs()[0], err)
	}
	gpus, err := ParseQueryGPU(out)
	if err != nil {
		return err
	}
	f.GPUs = gpus
	// The plain banner carries the driver and CUDA versions.
	if out, err := run(ctx, "nvidia-smi"); err == nil {
		f.Driver.DriverVersion, f.Driver.CUDADriverVersion = parseSMIBanner(out)
	} else {
		f.Errors = append(f.Errors, fmt.Sprintf("nvidia-smi: %v", err))
	}
	if out, err := run(ctx, "nvidia-smi", "topo", "-m"); err == nil {
		if t, err := ParseTopoMatrix(out); err == nil {
			f.Topology = topologyMatrix(t, len(gpus))
		} else {
			f.Errors = append(f.Errors, err.Error())
		}
	}
	var read, write, nvl [][]string
	for _, m := range []struct {
		flag string
		dst  *[][]string
	}{{"r", &read}, {"w", &write}, {"n", &nvl}} {
		out, err := run(ctx, "nvidia-smi", "topo", "-p2p", m.flag)
		if err != nil {
			continue
		}
		if p, err := ParseP2PMatrix(out); err == nil && len(p) == len(gpus) {
			*m.dst = p
		}
	}
	if read != nil || write != nil || nvl != nil {
		f.P2P = make([][]P2PFacts, len(gpus))
		for i := range gpus {
			f.P2P[i] = make([]P2PFacts, len(gpus))
			for j := range gpus {
				if i == j {
					continue
				}
				f.P2P[i][j] = P2PFacts{Read: cell(read, i, j), Write: cell(write, i, j), NVLink: cell(nvl, i, j)}
			}
		}
	}
	return nil
}

func cell(m [][]string, i, j int) string {
	if i < len(m) && j < len(m[i]) {
		return m[i][j]
	}
	return ""
}

// topologyMatrix turns a parsed `topo -m` into Facts.Topology for n GPUs.
func topologyMatrix(t Topology, n int) [][]string {
	out := make([][]string, n)
	for i := range out {
		out[i] = make([]string, n)
		for j := range out[i] {
			if i == j {
				out[i][j] = "X"
				continue
			}
			out[i][j] = t.Matrix["GPU"+strconv.Itoa(i)]["GPU"+strconv.Itoa(j)]
		}
	}
	return out
}

var (
	smiDriverRE = lazyre.New(`Driver Version:\s*(\d+\.\d+(?:\.\d+)?)`)
	smiCUDARE   = lazyre.New(`CUDA Version:\s*(\d+)\.(\d+)`)
)

// parseSMIBanner reads the driver version and the CUDA version (encoded as
// NVML does, 1000*major+10*minor) from plain `nvidia-smi` output.
func parseSMIBanner(out []byte) (driver string, cuda int) {
	if m := smiDriverRE().FindSubmatch(out); m != nil {
		driver = string(m[1])
	}
	if m := smiCUDARE().FindSubmatch(out); m != nil {
		maj, _ := strconv.Atoi(string(m[1]))
		minr, _ := strconv.Atoi(string(m[2]))
		cuda = maj*1000 + minr*10
	}
	return driver, cuda
}

func fileSHA256(path string) (string, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "__main__.py") // what Python runs of a folder given as the script
	}
	fh, err := os.Open(filepath.Clean(path))
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// probeRoute opens a TCP connection to the route's target from its source
// address and records the outcome.
func probeRoute(ctx context.Context, rt *Route, port int) {
	rt.Probe = port
	host := rt.Target
	if h, _, err := net.SplitHostPort(rt.Target); err == nil {
		host = h
	}
	d := net.Dialer{Timeout: 3 * time.Second}
	if ip := net.ParseIP(rt.Source); ip != nil {
		d.LocalAddr = &net.TCPAddr{IP: ip}
	}
	start := time.Now()
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		rt.ProbeErr = err.Error()
		return
	}
	rt.ProbeMs = float64(time.Since(start).Microseconds()) / 1000
	c.Close()
}
