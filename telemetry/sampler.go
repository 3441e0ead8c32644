package telemetry

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gorun/gorun/internal/clockevent"
)

// ErrNoGPUs means there is nothing to sample on this node: NVML did not
// load, or it sees no GPU of the job.
var ErrNoGPUs = errors.New("no GPUs to sample")

// Field values read in one call per sample: NVLink's cumulative data
// counters (KiB, summed over every link with scopeAllLinks), whose
// differences give throughput. PCIe is not read this way: NVML's PCIe byte
// counters (FI_DEV_PCIE_COUNT_*_BYTES) wrap, and on an H200 moving 4.7 GB/s
// they wrapped within each 1 s period (docs/device/h200-1gpu/telemetry/).
const scopeAllLinks = ^uint32(0)

var counterFields = []struct {
	id    uint32
	scope uint32
	unit  float64 // bytes per count
}{
	{nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, scopeAllLinks, 1024},
	{nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, scopeAllLinks, 1024},
}

const (
	fieldNVLinkRx = iota
	fieldNVLinkTx
)

// eventTypes are the NVML events watched during the run, each registered
// on its own so that a GPU lacking one still reports the others.
var eventTypes = []uint64{nvml.EventTypeXidCriticalError, nvml.EventTypeSingleBitEccError, nvml.EventTypeDoubleBitEccError}

// Sampler reads the job's GPUs on one node through NVML.
type Sampler struct {
	lib  nvml.Interface
	gpus []*gpuState

	events nvml.EventSet // nil when no event could be registered

	mu      sync.Mutex // guards pending
	pending map[int][]string
}

type gpuState struct {
	GPU
	dev  nvml.Device
	uuid string

	prevTime   time.Time
	prevCount  [2]uint64
	prevHave   [2]bool
	prevUncorr uint64
	haveUncorr bool
}

// Open initialises NVML and finds the GPUs of cfg; it returns an error
// wrapping ErrNoGPUs when NVML does not load or none of them is there. The
// caller must Close a Sampler it got.
func Open(lib nvml.Interface, cfg Config) (*Sampler, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: NVML: %s", ErrNoGPUs, nvml.ErrorString(ret))
	}
	s := &Sampler{lib: lib, pending: map[int][]string{}}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("%w: NVML device count: %s", ErrNoGPUs, nvml.ErrorString(ret))
	}
	want := cfg.GPUs
	if len(want) == 0 {
		for i := range n {
			want = append(want, GPU{Index: i})
		}
	}
	for _, g := range want {
		if g.Index < 0 || g.Index >= n {
			continue
		}
		dev, ret := lib.DeviceGetHandleByIndex(g.Index)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, _ := dev.GetUUID()
		s.gpus = append(s.gpus, &gpuState{GPU: g, dev: dev, uuid: uuid})
	}
	if len(s.gpus) == 0 {
		lib.Shutdown()
		return nil, fmt.Errorf("%w: NVML sees %d GPUs, none of them the job's", ErrNoGPUs, n)
	}
	s.registerEvents()
	return s, nil
}

func (s *Sampler) registerEvents() {
	set, ret := s.lib.EventSetCreate()
	if ret != nvml.SUCCESS || set == nil {
		return
	}
	any := false
	for _, g := range s.gpus {
		for _, t := range eventTypes {
			if g.dev.RegisterEvents(t, set) == nvml.SUCCESS {
				any = true
			}
		}
	}
	if !any {
		set.Free()
		return
	}
	s.events = set
}

// Close frees the event set and shuts NVML down.
func (s *Sampler) Close() {
	if s.events != nil {
		s.events.Free()
	}
	s.lib.Shutdown()
}

// GPUs returns the NVML indices sampled, in order.
func (s *Sampler) GPUs() []int {
	out := make([]int, len(s.gpus))
	for i, g := range s.gpus {
		out[i] = g.Index
	}
	return out
}

// eventWaitSlice bounds one wait for NVML events: Run returns only once
// the wait in progress does, and the node agent gives its sidecar 100 ms
// at the end of a job before it exits without it (a restart waits for
// that exit). NVML's wait sleeps in the driver, so short slices cost
// nothing.
const eventWaitSlice = 20 * time.Millisecond

// watchEvents waits for Xid and ECC events until ctx ends, and keeps them
// for the next sample of their GPU. Each wait is bounded, so it notices
// the end within timeout.
func (s *Sampler) watchEvents(ctx context.Context, timeout time.Duration) {
	if s.events == nil {
		return
	}
	for ctx.Err() == nil {
		ev, ret := s.events.Wait(uint32(timeout / time.Millisecond))
		if ret != nvml.SUCCESS {
			if ret != nvml.ERROR_TIMEOUT {
				// A broken event set would spin: wait a period instead.
				select {
				case <-ctx.Done():
				case <-time.After(timeout):
				}
			}
			continue
		}
		var what string
		switch ev.EventType {
		case nvml.EventTypeXidCriticalError:
			what = fmt.Sprintf("xid %d", ev.EventData)
		case nvml.EventTypeSingleBitEccError:
			what = "ecc single-bit"
		case nvml.EventTypeDoubleBitEccError:
			what = "ecc double-bit"
		default:
			what = fmt.Sprintf("event 0x%x", ev.EventType)
		}
		for _, g := range s.gpus {
			if g.dev == ev.Device {
				s.mu.Lock()
				s.pending[g.Index] = append(s.pending[g.Index], what)
				s.mu.Unlock()
			}
		}
	}
}

// Sample reads every GPU once; now stamps the samples and times the rates.
func (s *Sampler) Sample(now time.Time) []Sample {
	out := make([]Sample, 0, len(s.gpus))
	s.mu.Lock()
	pending := s.pending
	s.pending = map[int][]string{}
	s.mu.Unlock()
	// Each GPU is read in its own goroutine: the PCIe reading alone takes
	// 2 x 20 ms, which on 8 GPUs in a row would be a third of a 1 s period.
	out = out[:len(s.gpus)]
	var wg sync.WaitGroup
	for i, g := range s.gpus {
		wg.Go(func() { out[i] = g.read(now, pending[g.Index]) })
	}
	wg.Wait()
	return out
}

func (g *gpuState) read(now time.Time, events []string) Sample {
	d := g.dev
	sm := Sample{GPU: g.Index, UUID: g.uuid, Time: now,
		Ranks: nonNil(g.Ranks), LocalRanks: nonNil(g.LocalRanks),
		ClockReasons: []string{}, Events: append([]string{}, events...)}
	if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
		sm.SMPct = f64(float64(u.Gpu))
	}
	if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
		sm.MemUsedMiB = f64(float64(m.Used) / (1 << 20))
	}
	if p, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
		sm.PowerW = f64(float64(p) / 1000)
	}
	if p, ret := d.GetEnforcedPowerLimit(); ret == nvml.SUCCESS {
		sm.PowerCapW = f64(float64(p) / 1000)
	}
	if c, ret := d.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
		sm.SMClockMHz = f64(float64(c))
	}
	if t, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		sm.TempC = f64(float64(t))
	}
	if r, ret := d.GetCurrentClocksEventReasons(); ret == nvml.SUCCESS {
		// Idle is left out: it is not a slowdown.
		sm.ClockReasons = append(sm.ClockReasons, clockevent.Names(r&^uint64(clockevent.GpuIdle))...)
	}
	g.readCounters(now, &sm)
	if n, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		if g.haveUncorr && n > g.prevUncorr && len(events) == 0 {
			sm.Events = append(sm.Events, fmt.Sprintf("ecc uncorrected +%d", n-g.prevUncorr))
		}
		g.prevUncorr, g.haveUncorr = n, true
	}
	return sm
}

// readCounters turns NVML's cumulative NVLink counters into rates over the
// time since the previous sample, and reads PCIe throughput the way
// nvidia-smi dmon -s t does (nvmlDeviceGetPcieThroughput: bytes over a
// 20 ms window, so a sample, not an average over the period).
func (g *gpuState) readCounters(now time.Time, sm *Sample) {
	vals := make([]nvml.FieldValue, len(counterFields))
	for i, f := range counterFields {
		vals[i] = nvml.FieldValue{FieldId: f.id, ScopeId: f.scope}
	}
	ok := g.dev.GetFieldValues(vals) == nvml.SUCCESS
	dt := now.Sub(g.prevTime).Seconds()
	var rates [2]*float64
	for i, f := range counterFields {
		if !ok || nvml.Return(vals[i].NvmlReturn) != nvml.SUCCESS {
			g.prevHave[i] = false
			continue
		}
		v := binary.NativeEndian.Uint64(vals[i].Value[:])
		if g.prevHave[i] && dt > 0 && v >= g.prevCount[i] {
			rates[i] = f64(float64(v-g.prevCount[i]) * f.unit / dt / 1e6)
		}
		g.prevCount[i], g.prevHave[i] = v, true
	}
	g.prevTime = now
	sm.NVLinkRxMBps, sm.NVLinkTxMBps = rates[fieldNVLinkRx], rates[fieldNVLinkTx]
	if v, ret := g.dev.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES); ret == nvml.SUCCESS {
		sm.PCIeRxMBps = f64(float64(v) * 1e3 / 1e6) // KB/s
	}
	if v, ret := g.dev.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES); ret == nvml.SUCCESS {
		sm.PCIeTxMBps = f64(float64(v) * 1e3 / 1e6)
	}
}

func nonNil(v []int) []int {
	if v == nil {
		return []int{}
	}
	return slices.Clone(v)
}

// Run samples the GPUs of cfg every cfg.Interval until ctx ends, sending
// each sample as a Frame. When there is nothing to sample (ErrNoGPUs) it
// sends one Frame with a Notice saying why and returns at once. The
// first sample is taken at once, so even a short job has one.
func Run(ctx context.Context, lib nvml.Interface, cfg Config, send func(Frame)) {
	s, err := Open(lib, cfg)
	if err != nil {
		send(Frame{Notice: err.Error()})
		return
	}
	defer s.Close()
	every := cfg.Interval
	if every <= 0 {
		every = DefaultInterval
	}
	var wg sync.WaitGroup
	evCtx, stop := context.WithCancel(ctx)
	wg.Go(func() { s.watchEvents(evCtx, min(every, eventWaitSlice)) })
	defer wg.Wait()
	defer stop()

	t := time.NewTicker(every)
	defer t.Stop()
	now := time.Now()
	for {
		for _, sm := range s.Sample(now) {
			send(Frame{Sample: &sm})
		}
		select {
		case <-ctx.Done():
			return
		case now = <-t.C:
		}
	}
}
