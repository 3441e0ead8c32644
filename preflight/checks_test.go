package preflight

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// healthyNode is a 2-GPU NVLink node like the real H200 machine, with
// torch for CUDA 12.4.
func healthyNode() Facts {
	on := true
	gpu := func(i int) GPUFacts {
		g := GPUFacts{Index: i, Name: "NVIDIA H200", UUID: fmt.Sprintf("GPU-%d", i), BusID: fmt.Sprintf("0000:%02x:00.0", 0x18+i),
			MemoryMiB: 143771, ComputeMode: "Default", Persistence: true, ECC: &on,
			PCIeGen: 5, PCIeGenMax: 5, PCIeWidth: 16, PCIeWidthMax: 16, NUMANode: 0, LocalCPUs: "0-31"}
		for l := 0; l < 18; l++ {
			g.NVLinks = append(g.NVLinks, NVLinkFacts{Link: l, Active: true})
		}
		return g
	}
	return Facts{
		Host: "n0", Hostname: "n0", CPUCount: 32, CPUsAllowed: "0-31", Source: "nvml",
		Driver: DriverFacts{Loaded: true, KernelModuleVersion: "580.159.04", Flavor: "open", DriverVersion: "580.159.04",
			NVMLVersion: "13.580.159.04", CUDADriverVersion: 13000,
			Modules: map[string]bool{"nvidia": true, "nvidia_uvm": true}, DevNodes: []string{"/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}},
		GPUs:     []GPUFacts{gpu(0), gpu(1)},
		P2P:      [][]P2PFacts{{{}, {Read: "OK", Write: "OK", NVLink: "OK"}}, {{Read: "OK", Write: "OK", NVLink: "OK"}, {}}},
		Topology: [][]string{{"X", "NV18"}, {"NV18", "X"}},
		ShmBytes: 64 << 30, MemlockBytes: -1,
		Torch: TorchFacts{Found: true, Version: "2.6.0+cu124", CUDA: "12.4", NCCL: "2.21.5"},
	}
}

func cpuNode() Facts {
	return Facts{Host: "c0", CPUCount: 8, ShmBytes: 4 << 30, MemlockBytes: 8 << 20,
		Driver: DriverFacts{NVMLError: "ERROR_LIBRARY_NOT_FOUND", NVMLErrorCode: 12, Modules: map[string]bool{}}}
}

func TestCheck(t *testing.T) {
	gpuJob := Want{NProc: "gpu", GPUsRequested: true}
	tests := []struct {
		name   string
		facts  func() Facts
		want   Want
		id     string
		sev    Severity
		inText string // must appear in message or evidence
	}{
		{"healthy node has no warnings", healthyNode, gpuJob, "", SeverityOK, ""},
		{"cpu node, cpu job", cpuNode, Want{NProc: "4"}, "driver.present", SeverityOK, "no NVIDIA driver"},
		{"cpu node, gpu job", cpuNode, gpuJob, "driver.present", SeverityFail, "NVML library not found"},
		{"cpu node, 8 gpus asked", cpuNode, Want{NProc: "8", GPUsRequested: true}, "gpu.count", SeverityFail, "none are visible"},
		{"nouveau", func() Facts { f := cpuNode(); f.Driver.Modules["nouveau"] = true; return f }, Want{}, "driver.nouveau", SeverityFail, "nouveau"},
		{"half-done driver upgrade: library and module differ", func() Facts {
			f := healthyNode()
			f.Source, f.GPUs, f.Driver.NVMLError, f.Driver.NVMLErrorCode = "", nil, "ERROR_LIB_RM_VERSION_MISMATCH", 18
			f.Driver.DriverVersion, f.Driver.LibraryVersion = "", "580.172.08"
			return f
		}, gpuJob, "driver.library", SeverityFail, "580.172.08"},
		{"CUDA debugging variables set", func() Facts {
			f := healthyNode()
			f.Env = map[string]string{"CUDA_LAUNCH_BLOCKING": "1", "CUDA_INJECTION64_PATH": "/opt/x.so"}
			return f
		}, gpuJob, "env.cuda_debug", SeverityWarn, "CUDA_INJECTION64_PATH=/opt/x.so"},
		{"CUDA debugging variables hide credentials", func() Facts {
			f := healthyNode()
			f.Env = map[string]string{"CUDA_INJECTION64_PATH": "https://me:s3cr3t@h/x.so"}
			return f
		}, gpuJob, "env.cuda_debug", SeverityWarn, "CUDA_INJECTION64_PATH=https://me:<hidden>@h/x.so"},
		{"rm version mismatch", func() Facts {
			f := healthyNode()
			f.Source, f.GPUs, f.Driver.NVMLError, f.Driver.NVMLErrorCode = "", nil, "ERROR_LIB_RM_VERSION_MISMATCH", 18
			return f
		}, gpuJob, "driver.nvml", SeverityFail, "different driver versions"},
		{"driver not loaded", func() Facts {
			f := cpuNode()
			f.Driver.Loaded, f.Driver.NVMLError, f.Driver.NVMLErrorCode = true, "ERROR_DRIVER_NOT_LOADED", 9
			return f
		}, gpuJob, "driver.nvml", SeverityFail, "not running"},
		{"proc vs nvml version", func() Facts { f := healthyNode(); f.Driver.KernelModuleVersion = "570.86.15"; return f }, gpuJob, "driver.version", SeverityFail, "570.86.15"},
		{"uvm missing everywhere", func() Facts {
			f := healthyNode()
			f.Driver.Modules["nvidia_uvm"], f.Driver.DevNodes = false, []string{"/dev/nvidia0"}
			return f
		}, gpuJob, "driver.modules", SeverityWarn, "nvidia_uvm"},
		{"uvm device node is enough", func() Facts { f := healthyNode(); f.Driver.Modules["nvidia_uvm"] = false; return f }, gpuJob, "driver.modules", SeverityOK, ""},
		{"nproc above gpu count", healthyNode, Want{NProc: "8", GPUsRequested: true}, "gpu.count", SeverityFail, "only 2 GPUs"},
		{"gpu id beyond count", healthyNode, Want{NProc: "1", GPUsRequested: true, GPUIDs: []int{3}}, "gpu.count", SeverityFail, "GPU 3"},
		{"more workers than GPUs, GPUs not named", healthyNode, Want{NProc: "4"}, "gpu.count", SeverityWarn, "4 workers but 2 GPUs"},
		{"as many workers as GPUs, GPUs not named", healthyNode, Want{NProc: "2"}, "gpu.count", SeverityOK, "enough for one GPU per rank"},
		{"CUDA_VISIBLE_DEVICES beyond count", func() Facts { f := healthyNode(); f.Env = map[string]string{"CUDA_VISIBLE_DEVICES": "0,5"}; return f }, gpuJob, "env.cuda_visible_devices", SeverityFail, "entry 1"},
		{"CUDA_VISIBLE_DEVICES hides all", func() Facts { f := healthyNode(); f.Env = map[string]string{"CUDA_VISIBLE_DEVICES": ""}; return f }, gpuJob, "env.cuda_visible_devices", SeverityFail, "empty"},
		{"CUDA_VISIBLE_DEVICES by uuid", func() Facts { f := healthyNode(); f.Env = map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-1"}; return f }, gpuJob, "env.cuda_visible_devices", SeverityWarn, "GPU-1"},
		{"visible devices shrink the count", func() Facts { f := healthyNode(); f.Env = map[string]string{"CUDA_VISIBLE_DEVICES": "1"}; return f }, Want{NProc: "2", GPUsRequested: true}, "gpu.count", SeverityFail, "only 1 GPUs"},
		{"retirement pending", func() Facts { f := healthyNode(); f.GPUs[1].RetiredPagesPending = true; return f }, gpuJob, "gpu.memory", SeverityFail, "GPU 1"},
		{"many retired pages", func() Facts { f := healthyNode(); f.GPUs[0].RetiredPages = 20; return f }, gpuJob, "gpu.memory", SeverityWarn, "20 retired"},
		{"remap failed", func() Facts { f := healthyNode(); f.GPUs[0].RemapFailed = true; return f }, gpuJob, "gpu.memory", SeverityFail, "remap"},
		{"remap pending", func() Facts { f := healthyNode(); f.GPUs[0].RemapPending = true; return f }, gpuJob, "gpu.memory", SeverityWarn, "pending"},
		{"uncorrected ecc", func() Facts { f := healthyNode(); f.GPUs[0].UncorrectedECC = 2; return f }, gpuJob, "gpu.ecc", SeverityWarn, "2 volatile"},
		{"ecc off", func() Facts { off := false; f := healthyNode(); f.GPUs[1].ECC = &off; return f }, gpuJob, "gpu.ecc", SeverityWarn, "GPUs 1"},
		{"busy gpu", func() Facts {
			f := healthyNode()
			f.GPUs[0].Processes = []ProcessFacts{{PID: 77, Name: "python", UsedMiB: 1000}}
			return f
		}, gpuJob, "gpu.busy", SeverityWarn, "pid 77 python"},
		{"busy exclusive gpu", func() Facts {
			f := healthyNode()
			f.GPUs[0].ComputeMode, f.GPUs[0].Processes = "Exclusive_Process", []ProcessFacts{{PID: 77}}
			return f
		}, gpuJob, "gpu.busy", SeverityFail, "Exclusive_Process"},
		{"prohibited", func() Facts { f := healthyNode(); f.GPUs[1].ComputeMode = "Prohibited"; return f }, gpuJob, "gpu.compute_mode", SeverityFail, "Prohibited"},
		{"mig", func() Facts { f := healthyNode(); f.GPUs[0].MIG = true; return f }, gpuJob, "gpu.mig", SeverityWarn, "MIG"},
		{"persistence off", func() Facts { f := healthyNode(); f.GPUs[0].Persistence = false; return f }, gpuJob, "gpu.persistence", SeverityWarn, "GPUs 0"},
		{"pcie width", func() Facts { f := healthyNode(); f.GPUs[1].PCIeWidth = 8; return f }, gpuJob, "gpu.pcie_width", SeverityWarn, "x8 of x16"},
		{"pcie gen at idle", func() Facts { f := healthyNode(); f.GPUs[1].PCIeGen = 1; return f }, gpuJob, "gpu.pcie_gen", SeverityOK, "gen 1/5"},
		{"p2p not supported", func() Facts { f := healthyNode(); f.P2P[0][1].Read = "CNS"; return f }, gpuJob, "gpu.p2p", SeverityWarn, "read CNS"},
		{"sys topology", func() Facts { f := healthyNode(); f.Topology = [][]string{{"X", "SYS"}, {"SYS", "X"}}; return f }, gpuJob, "gpu.topology", SeverityWarn, "GPU0-GPU1"},
		{"nvlink down", func() Facts { f := healthyNode(); f.GPUs[1].NVLinks[4].Active = false; return f }, gpuJob, "gpu.nvlink", SeverityFail, "links 4"},
		{"fabric not ready", func() Facts { f := healthyNode(); f.GPUs[0].FabricState = "in_progress"; return f }, gpuJob, "gpu.fabric", SeverityFail, "in_progress"},
		{"cuda major too old", func() Facts { f := healthyNode(); f.Driver.CUDADriverVersion = 11080; return f }, gpuJob, "cuda.compat", SeverityFail, "CUDA 11.8"},
		{"cuda minor older", func() Facts { f := healthyNode(); f.Driver.CUDADriverVersion = 12020; return f }, gpuJob, "cuda.compat", SeverityWarn, "12.2"},
		{"cuda newer driver", healthyNode, gpuJob, "cuda.compat", SeverityOK, "torch built for CUDA 12.4"},
		{"torch found", healthyNode, gpuJob, "torch.found", SeverityOK, "finds torch 2.6.0+cu124"},
		{"torch missing for torchrun's python", func() Facts {
			f := healthyNode()
			f.Torch = TorchFacts{Python: "/venv/bin/python3", Err: "torch is not installed for /venv/bin/python3"}
			return f
		}, gpuJob, "torch.found", SeverityFail, "not installed"},
		{"torch missing for a guessed python3", func() Facts {
			f := cpuNode()
			f.Torch = TorchFacts{Python: "/usr/bin/python3", Err: "torch is not installed for /usr/bin/python3", Guessed: true}
			return f
		}, Want{NProc: "4"}, "torch.found", SeverityWarn, "not installed"},
		{"torchrun not there", func() Facts {
			f := cpuNode()
			f.Torch = TorchFacts{Python: "/usr/bin/python3", Err: "torch is not installed for /usr/bin/python3", Guessed: true,
				TorchrunMissing: `exec: "/opt/venv/bin/torchrun": stat /opt/venv/bin/torchrun: no such file or directory`}
			return f
		}, Want{NProc: "4"}, "torch.torchrun", SeverityFail, "no such file"},
		{"rdma port down", func() Facts {
			f := healthyNode()
			f.RDMA = []RDMAPort{{Device: "mlx5_0", Port: 1, State: "DOWN", PhysState: "Disabled", LinkLayer: "InfiniBand"}}
			return f
		}, gpuJob, "rdma.ports", SeverityWarn, "mlx5_0:1"},
		{"roce without v2 gid", func() Facts {
			f := healthyNode()
			f.RDMA = []RDMAPort{{Device: "mlx5_1", Port: 1, State: "ACTIVE", LinkLayer: "Ethernet", NetDev: "ens1"}}
			f.GDR.Module = "nvidia_peermem"
			return f
		}, gpuJob, "rdma.gid", SeverityWarn, "ens1"},
		{"no gdr module", func() Facts {
			f := healthyNode()
			f.RDMA = []RDMAPort{{Device: "mlx5_0", Port: 1, State: "ACTIVE", LinkLayer: "InfiniBand"}}
			return f
		}, gpuJob, "rdma.gdr", SeverityWarn, "DMA-BUF"},
		{"memlock with rdma", func() Facts {
			f := healthyNode()
			f.RDMA = []RDMAPort{{Device: "mlx5_0", Port: 1, State: "ACTIVE", LinkLayer: "InfiniBand"}}
			f.MemlockBytes = 65536
			return f
		}, gpuJob, "sys.memlock", SeverityWarn, "65536"},
		{"memlock without rdma is fine", func() Facts { f := healthyNode(); f.MemlockBytes = 65536; return f }, gpuJob, "rdma.ports", SeverityOK, "no RDMA"},
		{"small shm", func() Facts { f := healthyNode(); f.ShmBytes = 64 << 20; return f }, gpuJob, "sys.shm", SeverityWarn, "64 MiB"},
		{"no route", func() Facts {
			f := healthyNode()
			f.Route = &Route{Target: "10.9.9.9", Err: "network is unreachable"}
			return f
		}, gpuJob, "net.route", SeverityFail, "unreachable"},
		{"nvidia-smi fallback", func() Facts {
			f := healthyNode()
			f.Source, f.Driver.NVMLError = "nvidia-smi", "NVML not available in this build"
			return f
		}, gpuJob, "driver.nvml", SeverityWarn, "nvidia-smi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := Check(tt.facts(), tt.want)
			if tt.id == "" {
				for _, f := range fs {
					if f.Severity != SeverityOK {
						t.Errorf("unexpected %s %s: %s (%s)", f.Severity, f.ID, f.Message, f.Evidence)
					}
				}
				return
			}
			for _, f := range fs {
				if f.ID == tt.id && f.Severity == tt.sev && strings.Contains(f.Message+" "+f.Evidence, tt.inText) {
					if f.Severity != SeverityOK && f.Remedy == "" {
						t.Errorf("%s has no remedy", f.ID)
					}
					return
				}
			}
			t.Errorf("no %s finding %s containing %q in:\n%s", tt.sev, tt.id, tt.inText, dumpFindings(fs))
		})
	}
}

// TestGPUCountWording: the gpu.count finding speaks of what the user gave
// (no "--nproc-per-node gpu" for a number), and never says the job runs on
// CPUs when CUDA_VISIBLE_DEVICES is what hides the GPUs.
func TestGPUCountWording(t *testing.T) {
	hidden := func(cvd string) func() Facts {
		return func() Facts { f := healthyNode(); f.Env = map[string]string{"CUDA_VISIBLE_DEVICES": cvd}; return f }
	}
	tests := []struct {
		name     string
		facts    func() Facts
		nproc    string
		sev      Severity
		contains string
		lacks    []string
	}{
		{"a number", healthyNode, "2", SeverityOK, "2 workers, 2 GPUs visible", []string{"--nproc-per-node gpu", "by name"}},
		{"a smaller number", healthyNode, "1", SeverityOK, "1 worker, 2 GPUs visible", []string{"--nproc-per-node gpu"}},
		{"empty CUDA_VISIBLE_DEVICES", hidden(""), "2", SeverityWarn, "CUDA_VISIBLE_DEVICES hides all 2 GPUs", []string{"runs on CPUs", "no GPUs"}},
		{"bad CUDA_VISIBLE_DEVICES", hidden("7"), "4", SeverityWarn, "CUDA_VISIBLE_DEVICES hides all 2 GPUs", []string{"runs on CPUs", "no GPUs"}},
		{"hidden on purpose for a CPU job", hidden(""), "cpu", SeverityOK, "(--nproc-per-node cpu)", nil},
		{"cpu job on a GPU node", healthyNode, "cpu", SeverityOK, "the node's 2 GPUs are not used", []string{"--nproc-per-node gpu"}},
		{"cpu node", cpuNode, "4", SeverityOK, "no GPUs; the job runs on CPUs", nil},
		{"auto", healthyNode, "auto", SeverityOK, "2 GPUs visible", []string{"--nproc-per-node gpu"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := Check(tt.facts(), Want{NProc: tt.nproc})
			var count []Finding
			for _, f := range fs {
				if f.ID == "gpu.count" {
					count = append(count, f)
				}
			}
			if len(count) != 1 {
				t.Fatalf("%d gpu.count findings:\n%s", len(count), dumpFindings(fs))
			}
			f := count[0]
			if f.Severity != tt.sev || !strings.Contains(f.Message, tt.contains) {
				t.Errorf("got %s %q, want %s containing %q", f.Severity, f.Message, tt.sev, tt.contains)
			}
			for _, s := range tt.lacks {
				if strings.Contains(f.Message, s) {
					t.Errorf("message %q says %q", f.Message, s)
				}
			}
			if f.Severity != SeverityOK && f.Remedy == "" {
				t.Errorf("no remedy: %+v", f)
			}
		})
	}
}

func dumpFindings(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "  %s %s: %s [%s]\n", f.Severity, f.ID, f.Message, f.Evidence)
	}
	return b.String()
}

func TestCPUNodeHasOneDriverFinding(t *testing.T) {
	fs := Check(cpuNode(), Want{NProc: "4"})
	n := 0
	for _, f := range fs {
		if strings.HasPrefix(f.ID, "driver.") {
			n++
		}
		if f.Severity == SeverityFail {
			t.Errorf("fail on a CPU node running a CPU job: %+v", f)
		}
	}
	if n != 1 {
		t.Errorf("%d driver findings, want 1:\n%s", n, dumpFindings(fs))
	}
}

func TestCheckAcross(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	node := func(host string, mod func(*Facts)) NodeReport {
		f := healthyNode()
		f.Host, f.Time, f.ScriptSHA256 = host, t0, "abc"
		if mod != nil {
			mod(&f)
		}
		return NodeReport{Host: host, Facts: f}
	}
	tests := []struct {
		name  string
		nodes []NodeReport
		id    string
		sev   Severity
	}{
		{"same everything", []NodeReport{node("a", nil), node("b", nil)}, "across.torch", SeverityOK},
		{"torch differs", []NodeReport{node("a", nil), node("b", func(f *Facts) { f.Torch.Version = "2.5.1+cu124" })}, "across.torch", SeverityFail},
		{"nccl differs", []NodeReport{node("a", nil), node("b", func(f *Facts) { f.Torch.NCCL = "2.20.5" })}, "across.nccl", SeverityFail},
		{"driver differs", []NodeReport{node("a", nil), node("b", func(f *Facts) { f.Driver.DriverVersion = "570.1" })}, "across.driver", SeverityWarn},
		{"script differs", []NodeReport{node("a", nil), node("b", func(f *Facts) { f.ScriptSHA256 = "def" })}, "across.script", SeverityFail},
		{"gpu count differs", []NodeReport{node("a", nil), node("b", func(f *Facts) { f.GPUs = f.GPUs[:1] })}, "across.gpu_count", SeverityWarn},
		{"gpu model differs", []NodeReport{node("a", nil), node("b", func(f *Facts) { f.GPUs[0].Name = "NVIDIA H100" })}, "across.gpu_model", SeverityWarn},
		{"clock skew", []NodeReport{node("a", nil), node("b", func(f *Facts) { f.Time = t0.Add(-3 * time.Second) })}, "across.clock", SeverityWarn},
		{"clock fine", []NodeReport{node("a", nil), node("b", func(f *Facts) { f.Time = t0.Add(300 * time.Millisecond) })}, "across.clock", SeverityOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := CheckAcross(tt.nodes)
			for _, f := range fs {
				if f.ID == tt.id {
					if f.Severity != tt.sev {
						t.Errorf("%s = %s, want %s (%s)", f.ID, f.Severity, tt.sev, f.Evidence)
					}
					return
				}
			}
			t.Errorf("no %s in:\n%s", tt.id, dumpFindings(fs))
		})
	}
	if CheckAcross([]NodeReport{node("a", nil)}) != nil {
		t.Error("one node has cross-node findings")
	}
}

// TestRealH200 checks the facts collected through NVML on the 2-GPU H200
// machine (testdata/real/h200-2gpu, written by TestCollectRealMachine).
func TestRealH200(t *testing.T) {
	b, err := os.ReadFile("testdata/real/h200-2gpu/report.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, n := range rep.Nodes {
		t.Run(n.Host, func(t *testing.T) {
			f := n.Facts
			if len(f.GPUs) != 2 || f.GPUs[0].Name != "NVIDIA H200" || f.GPUs[1].BusID != "0000:00:07.0" {
				t.Fatalf("GPUs = %+v", f.GPUs)
			}
			if f.Topology[0][1] != "NV18" || f.Topology[1][0] != "NV18" {
				t.Errorf("topology = %v", f.Topology)
			}
			if f.P2P[0][1].Read != P2POK || f.P2P[1][0].Write != P2POK {
				t.Errorf("p2p = %v", f.P2P)
			}
			if f.Driver.KernelModuleVersion != "580.159.04" || f.Driver.CUDADriverVersion != 13000 {
				t.Errorf("driver = %+v", f.Driver)
			}
			if f.Source == "nvml" {
				for _, g := range f.GPUs {
					active := 0
					for _, l := range g.NVLinks {
						if l.Active {
							active++
						}
					}
					if active != 18 {
						t.Errorf("GPU %d: %d active NVLinks, want 18", g.Index, active)
					}
				}
			}
			fs := Check(f, Want{NProc: "2", GPUsRequested: true})
			for _, fd := range fs {
				if fd.Severity == SeverityFail {
					t.Errorf("fail on the real machine: %+v", fd)
				}
			}
			if fs := Check(f, Want{NProc: "3", GPUsRequested: true}); worst(fs) != SeverityFail {
				t.Error("3 GPU processes on 2 GPUs did not fail")
			}
		})
	}
}
