package telemetry

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fakeGPU is what one mock device reports; counters advance by the rates
// given each time the field values are read.
type fakeGPU struct {
	util, clock, powerMW, capMW, temp uint32
	reasons                           uint64
	nvlinkKiB                         uint64 // per read
	noFields                          bool   // GetFieldValues not supported
	pcieKBs                           uint32 // GetPcieThroughput's answer

	mu    sync.Mutex
	reads uint64
}

func (g *fakeGPU) device(i int) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:               func() (string, nvml.Return) { return fmt.Sprintf("GPU-%d", i), nvml.SUCCESS },
		GetUtilizationRatesFunc:   func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: g.util}, nvml.SUCCESS },
		GetMemoryInfoFunc:         func() (nvml.Memory, nvml.Return) { return nvml.Memory{Used: 3 << 30}, nvml.SUCCESS },
		GetPowerUsageFunc:         func() (uint32, nvml.Return) { return g.powerMW, nvml.SUCCESS },
		GetEnforcedPowerLimitFunc: func() (uint32, nvml.Return) { return g.capMW, nvml.SUCCESS },
		GetClockInfoFunc: func(c nvml.ClockType) (uint32, nvml.Return) {
			if c != nvml.CLOCK_SM {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return g.clock, nvml.SUCCESS
		},
		GetTemperatureFunc:               func(nvml.TemperatureSensors) (uint32, nvml.Return) { return g.temp, nvml.SUCCESS },
		GetCurrentClocksEventReasonsFunc: func() (uint64, nvml.Return) { return g.reasons, nvml.SUCCESS },
		GetTotalEccErrorsFunc: func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
			return 0, nvml.ERROR_NOT_SUPPORTED
		},
		RegisterEventsFunc: func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS },
		GetPcieThroughputFunc: func(nvml.PcieUtilCounter) (uint32, nvml.Return) {
			return g.pcieKBs, nvml.SUCCESS
		},
		GetFieldValuesFunc: func(vals []nvml.FieldValue) nvml.Return {
			if g.noFields {
				return nvml.ERROR_NOT_SUPPORTED
			}
			g.mu.Lock()
			g.reads++
			n := g.reads
			g.mu.Unlock()
			for i := range vals {
				var v uint64
				switch vals[i].FieldId {
				case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
					if vals[i].ScopeId != ^uint32(0) {
						vals[i].NvmlReturn = uint32(nvml.ERROR_INVALID_ARGUMENT)
						continue
					}
					v = n * g.nvlinkKiB
				}
				binary.NativeEndian.PutUint64(vals[i].Value[:], v)
				vals[i].NvmlReturn = uint32(nvml.SUCCESS)
			}
			return nvml.SUCCESS
		},
	}
}

// fakeNode builds an nvml.Interface over the given GPUs, with an event set
// that delivers events once, then times out.
func fakeNode(gpus []*fakeGPU, events []nvml.EventData) (*mock.Interface, []*mock.Device) {
	devs := make([]*mock.Device, len(gpus))
	for i, g := range gpus {
		devs[i] = g.device(i)
	}
	var mu sync.Mutex
	set := &mock.EventSet{
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
			mu.Lock()
			defer mu.Unlock()
			if len(events) == 0 {
				time.Sleep(5 * time.Millisecond)
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			ev := events[0]
			events = events[1:]
			return ev, nvml.SUCCESS
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	lib := &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS },
	}
	return lib, devs
}

func busyH200() *fakeGPU {
	return &fakeGPU{util: 97, clock: 1980, powerMW: 650_000, capMW: 700_000, temp: 61,
		reasons: nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwThermalSlowdown, nvlinkKiB: 1 << 20, pcieKBs: 2500}
}

func TestSampleReadings(t *testing.T) {
	lib, _ := fakeNode([]*fakeGPU{busyH200(), busyH200()}, nil)
	s, err := Open(lib, Config{GPUs: []GPU{{Index: 1, Ranks: []int{9}, LocalRanks: []int{1}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.GPUs(); !slices.Equal(got, []int{1}) {
		t.Fatalf("GPUs = %v, want [1]", got)
	}
	t0 := time.Unix(1000, 0)
	first := s.Sample(t0)
	second := s.Sample(t0.Add(2 * time.Second))
	if len(first) != 1 || len(second) != 1 {
		t.Fatalf("samples = %d, %d", len(first), len(second))
	}
	a, b := first[0], second[0]
	if a.GPU != 1 || a.UUID != "GPU-1" || !slices.Equal(a.Ranks, []int{9}) || !slices.Equal(a.LocalRanks, []int{1}) {
		t.Errorf("identity = %d %s %v %v", a.GPU, a.UUID, a.Ranks, a.LocalRanks)
	}
	checks := []struct {
		name string
		got  *float64
		want float64
	}{
		{"sm", a.SMPct, 97}, {"mem", a.MemUsedMiB, 3072}, {"power", a.PowerW, 650}, {"cap", a.PowerCapW, 700},
		{"clock", a.SMClockMHz, 1980}, {"temp", a.TempC, 61},
		// 1 GiB of NVLink data per read, 2 s apart: 536.9 MB/s each way.
		{"nvlink rx", b.NVLinkRxMBps, 536.870912}, {"nvlink tx", b.NVLinkTxMBps, 536.870912},
		{"pcie rx", b.PCIeRxMBps, 2.5}, {"pcie tx", b.PCIeTxMBps, 2.5}, {"pcie first", a.PCIeRxMBps, 2.5},
	}
	for _, c := range checks {
		if c.got == nil || *c.got < c.want-1e-6 || *c.got > c.want+1e-6 {
			t.Errorf("%s = %v, want %v", c.name, deref(c.got), c.want)
		}
	}
	if a.NVLinkRxMBps != nil || a.NVLinkTxMBps != nil {
		t.Errorf("first sample has NVLink rates: %v %v (a rate needs two readings)", deref(a.NVLinkRxMBps), deref(a.NVLinkTxMBps))
	}
	if !slices.Equal(a.ClockReasons, []string{"sw_power_cap", "hw_thermal_slowdown"}) {
		t.Errorf("clock reasons = %q", a.ClockReasons)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestSampleMissingReadings(t *testing.T) {
	g := &fakeGPU{util: 5, noFields: true, pcieKBs: 2000}
	lib, devs := fakeNode([]*fakeGPU{g}, nil)
	devs[0].GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	s, err := Open(lib, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sm := s.Sample(time.Now())[0]
	if sm.PCIeRxMBps == nil || *sm.PCIeRxMBps != 2 || sm.PCIeTxMBps == nil || *sm.PCIeTxMBps != 2 {
		t.Errorf("pcie = %v %v, want 2 MB/s (2000 KB/s from GetPcieThroughput)", deref(sm.PCIeRxMBps), deref(sm.PCIeTxMBps))
	}
	if sm.NVLinkRxMBps != nil || sm.TempC != nil {
		t.Errorf("unsupported readings not nil: nvlink %v temp %v", deref(sm.NVLinkRxMBps), deref(sm.TempC))
	}
	if sm.Ranks == nil || sm.ClockReasons == nil || sm.Events == nil {
		t.Error("nil slices would be null in JSON, not []")
	}
}

func TestRunNoGPUs(t *testing.T) {
	tests := []struct {
		name   string
		lib    *mock.Interface
		notice string
	}{
		{"nvml missing", &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}, "no GPUs to sample: NVML"},
		{"no devices", &mock.Interface{
			InitFunc:           func() nvml.Return { return nvml.SUCCESS },
			ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
			DeviceGetCountFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
		}, "NVML sees 0 GPUs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var frames []Frame
			done := make(chan struct{})
			go func() {
				defer close(done)
				Run(context.Background(), tt.lib, Config{Interval: 10 * time.Millisecond}, func(f Frame) { frames = append(frames, f) })
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Run kept going with nothing to sample")
			}
			if len(frames) != 1 || frames[0].Sample != nil || !strings.Contains(frames[0].Notice, tt.notice) {
				t.Fatalf("frames = %+v, want one notice containing %q", frames, tt.notice)
			}
		})
	}
}

func TestRunSamplesAndEvents(t *testing.T) {
	lib, devs := fakeNode([]*fakeGPU{busyH200(), busyH200()}, nil)
	// The Xid is delivered through the event set on GPU 1.
	lib2, _ := fakeNode(nil, []nvml.EventData{{Device: devs[1], EventType: nvml.EventTypeXidCriticalError, EventData: 79}})
	lib.EventSetCreateFunc = lib2.EventSetCreateFunc

	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var samples []Sample
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, lib, Config{Interval: 20 * time.Millisecond}, func(f Frame) {
			mu.Lock()
			defer mu.Unlock()
			if f.Sample != nil {
				samples = append(samples, *f.Sample)
			}
		})
	}()
	deadline := time.After(5 * time.Second)
	for {
		mu.Lock()
		n, xid := len(samples), false
		for _, s := range samples {
			if s.GPU == 1 && slices.Contains(s.Events, "xid 79") {
				xid = true
			}
		}
		mu.Unlock()
		if n >= 6 && xid {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("after 5 s: %d samples, xid seen %v", n, xid)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if calls := len(lib.ShutdownCalls()); calls != 1 {
		t.Errorf("NVML shut down %d times, want 1", calls)
	}
}
