package preflight

import (
	"github.com/gorun/gorun/internal/cpuset"
	"github.com/gorun/gorun/internal/lazyre"
	"github.com/gorun/gorun/internal/secret"

	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Kernel modules preflight reports on, loaded or not. Names use the loaded
// (underscore) form.
var watchedModules = []string{
	"nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem",
	"nv_peer_mem", "nvidia_fs", "gdrdrv", "nouveau", "ib_core", "mlx5_core", "mlx5_ib",
}

// procVersionRE finds the driver version in /proc/driver/nvidia/version,
// both the proprietary ("Kernel Module  535.104.05") and the open
// ("Open Kernel Module for x86_64  580.159.04") forms.
var procVersionRE = lazyre.New(`Kernel Module(?: for \w+)?\s+(\d+\.\d+(?:\.\d+)?)`)

// sysReader reads files below a filesystem root ("/" on a node, a testdata
// tree in tests).
type sysReader struct{ root string }

func (r sysReader) path(p string) string { return filepath.Join(r.root, p) }

// read returns the trimmed content of a file below the root.
func (r sysReader) read(p string) (string, error) {
	b, err := os.ReadFile(r.path(p))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func (r sysReader) exists(p string) bool {
	_, err := os.Stat(r.path(p))
	return err == nil
}

// readInt reads a file holding one integer; def when missing or malformed.
func (r sysReader) readInt(p string, def int) int {
	s, err := r.read(p)
	if err != nil {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

// collectSystem fills the facts that come from procfs and sysfs. Problems
// other than "not there" are appended to f.Errors.
func collectSystem(r sysReader, f *Facts) {
	note := func(what string, err error) {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			f.Errors = append(f.Errors, fmt.Sprintf("%s: %v", what, err))
		}
	}
	if s, err := r.read("proc/sys/kernel/hostname"); err == nil {
		f.Hostname = s
	} else {
		note("hostname", err)
	}
	if s, err := r.read("proc/sys/kernel/osrelease"); err == nil {
		f.Kernel = s
	} else {
		note("kernel release", err)
	}
	f.Arch = unameArch(runtime.GOARCH)
	if s, err := r.read("sys/devices/system/cpu/online"); err == nil {
		if cpus, err := cpuset.Parse(s); err == nil {
			f.CPUCount = len(cpus)
		} else {
			note("online CPUs", err)
		}
	} else {
		note("online CPUs", err)
	}
	f.CPUsAllowed = procStatusField(r, "Cpus_allowed_list")
	f.NUMANodes = numaNodes(r)

	d := &f.Driver
	if b, err := os.ReadFile(r.path("proc/driver/nvidia/version")); err == nil {
		d.Loaded = true
		d.ProcVersion, d.KernelModuleVersion, d.Flavor = parseProcVersion(string(b))
	} else {
		note("/proc/driver/nvidia/version", err)
	}
	d.LibraryVersion = nvmlLibraryVersion(r)
	mods, err := loadedModules(r)
	note("/proc/modules", err)
	d.Modules = mods
	d.DevNodes = devNodes(r)
	f.GDR = gdrFacts(r, mods)

	f.ShmBytes = shmBytes(r)
	f.MemlockBytes, err = memlockBytes(r)
	note("memlock limit", err)
}

// nvmlLibDirs are where distributions and NVIDIA's installers put
// libnvidia-ml.so.1 (the last one inside NVIDIA's container images).
var nvmlLibDirs = []string{
	"usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib", "usr/local/nvidia/lib64",
}

// nvmlLibraryVersion is the driver version in the name of the file
// libnvidia-ml.so.1 links to, "" when there is none.
func nvmlLibraryVersion(r sysReader) string {
	for _, dir := range nvmlLibDirs {
		target, err := os.Readlink(r.path(dir + "/libnvidia-ml.so.1"))
		if err != nil {
			continue
		}
		if v, ok := strings.CutPrefix(filepath.Base(target), "libnvidia-ml.so."); ok && v != "1" {
			return v
		}
	}
	return ""
}

// parseProcVersion reads /proc/driver/nvidia/version: the first line, the
// driver version in it and the module flavour.
func parseProcVersion(s string) (line, version, flavor string) {
	line, _, _ = strings.Cut(s, "\n")
	line = strings.TrimSpace(line)
	if m := procVersionRE().FindStringSubmatch(line); m != nil {
		version = m[1]
	}
	switch {
	case strings.Contains(line, "Open Kernel Module"):
		flavor = "open"
	case strings.Contains(line, "Kernel Module"):
		flavor = "proprietary"
	}
	return line, version, flavor
}

// loadedModules reports every watched module as loaded or not, from
// /proc/modules and, for what that misses, /sys/module/<name> (which exists
// only for loaded modules; built-in ones without parameters lack it).
func loadedModules(r sysReader) (map[string]bool, error) {
	mods := make(map[string]bool, len(watchedModules))
	for _, m := range watchedModules {
		mods[m] = false
	}
	b, err := os.ReadFile(r.path("proc/modules"))
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
			if _, watched := mods[name]; watched {
				mods[name] = true
			}
		}
	}
	for name, loaded := range mods {
		if !loaded && r.exists("sys/module/"+name+"/initstate") {
			mods[name] = true
		}
	}
	return mods, err
}

// devNodes lists /dev/nvidia* (nvidiactl, nvidia0, nvidia-uvm, ...).
func devNodes(r sysReader) []string {
	m, _ := filepath.Glob(r.path("dev/nvidia*"))
	out := make([]string, 0, len(m))
	for _, p := range m {
		out = append(out, "/dev/"+filepath.Base(p))
	}
	sort.Strings(out)
	return out
}

// gdrFacts reports the GPUDirect RDMA kernel support NCCL looks for
// (src/transport/net_ib/gdr.cc): nvidia_peermem, or the legacy nv_peer_mem.
func gdrFacts(r sysReader, mods map[string]bool) GDRFacts {
	for _, c := range []struct{ module, path string }{
		{"nvidia_peermem", "sys/module/nvidia_peermem/version"},
		{"nv_peer_mem", "sys/kernel/mm/memory_peers/nv_mem/version"},
		{"nv_peer_mem", "sys/kernel/mm/memory_peers/nv_mem_nc/version"},
	} {
		if r.exists(c.path) {
			return GDRFacts{Module: c.module, Evidence: "/" + c.path}
		}
	}
	if mods["nvidia_peermem"] {
		return GDRFacts{Module: "nvidia_peermem", Evidence: "/proc/modules"}
	}
	return GDRFacts{}
}

// numaNodes lists /sys/devices/system/node/node*/cpulist.
func numaNodes(r sysReader) []NUMANode {
	m, _ := filepath.Glob(r.path("sys/devices/system/node/node[0-9]*"))
	var out []NUMANode
	for _, p := range m {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "node"))
		if err != nil {
			continue
		}
		cpus, _ := r.read(filepath.Join("sys/devices/system/node", filepath.Base(p), "cpulist"))
		out = append(out, NUMANode{ID: id, CPUs: cpus})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// gpuLocality fills NUMA node and local CPUs of each GPU from its PCI device
// in sysfs; the sysfs view wins over NVML's affinity because it is what
// torch and NCCL read.
func gpuLocality(r sysReader, gpus []GPUFacts) {
	for i := range gpus {
		g := &gpus[i]
		if g.BusID == "" {
			continue
		}
		dir := "sys/bus/pci/devices/" + g.BusID
		g.NUMANode = r.readInt(dir+"/numa_node", g.NUMANode)
		if s, err := r.read(dir + "/local_cpulist"); err == nil && s != "" {
			g.LocalCPUs = s
		}
	}
}

// procStatusField reads one field of /proc/self/status.
func procStatusField(r sysReader, key string) string {
	b, err := os.ReadFile(r.path("proc/self/status"))
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// memlockBytes reads the soft RLIMIT_MEMLOCK from /proc/self/limits, so a
// testdata tree can stand in for the node; -1 means unlimited.
func memlockBytes(r sysReader) (int64, error) {
	b, err := os.ReadFile(r.path("proc/self/limits"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "Max locked memory") {
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(line, "Max locked memory"))
		if len(fields) == 0 {
			break
		}
		if fields[0] == "unlimited" {
			return -1, nil
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %q: %w", line, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("no \"Max locked memory\" line in /proc/self/limits")
}

// shmBytes is the size of the filesystem at /dev/shm; 0 when missing.
func shmBytes(r sysReader) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(r.path("dev/shm"), &st); err != nil {
		return 0
	}
	return int64(st.Blocks) * int64(st.Bsize)
}

// unameArch spells GOARCH the way `uname -m` does.
func unameArch(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	}
	return goarch
}

// envPrefixes are the variables Facts.Env keeps; everything else stays on
// the node.
var envPrefixes = []string{"CUDA_", "NCCL_", "TORCH_", "NVIDIA_", "PET_", "GLOO_", "OMP_", "UCX_",
	"NSIGHT_CUDA_DEBUGGER", "COMPUTE_PROFILE", "OPENCL_PROFILE"}

// envFacts filters environ ("K=V" list) down to the variables that shape a
// GPU job.
func envFacts(environ []string) map[string]string {
	out := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		keep := k == "LD_LIBRARY_PATH"
		for _, p := range envPrefixes {
			keep = keep || strings.HasPrefix(k, p)
		}
		if keep {
			// Facts are printed and sent to the head; credentials stay on
			// the node.
			out[k] = secret.Redact(k, v)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// HostInterfaces lists this machine's network interfaces (net.Interfaces).
func HostInterfaces() ([]Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	out := make([]Interface, 0, len(ifs))
	for _, ifc := range ifs {
		i := Interface{
			Name:     ifc.Name,
			Up:       ifc.Flags&net.FlagUp != 0,
			Loopback: ifc.Flags&net.FlagLoopback != 0,
			MTU:      ifc.MTU,
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			i.Addrs = append(i.Addrs, a.String())
		}
		out = append(out, i)
	}
	return out, nil
}

// HostRoute finds how this machine reaches target ("10.0.0.1",
// "node0:29500", "[fe80::1%eth0]:22"): it "connects" a UDP socket, which
// sends nothing but makes the kernel choose the source address, and then
// names the interface that holds that address.
func HostRoute(ctx context.Context, target string, ifs []Interface) Route {
	rt := Route{Target: target}
	hostport := target
	if _, _, err := net.SplitHostPort(target); err != nil {
		hostport = net.JoinHostPort(target, "9") // discard port; nothing is sent
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", hostport)
	if err != nil {
		rt.Err = err.Error()
		return rt
	}
	defer c.Close()
	src, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok {
		rt.Err = fmt.Sprintf("unexpected local address %v", c.LocalAddr())
		return rt
	}
	rt.Source = src.IP.String()
	rt.Interface = interfaceWith(ifs, src.IP)
	return rt
}

// interfaceWith names the interface holding ip, "" when none does.
func interfaceWith(ifs []Interface, ip net.IP) string {
	for _, i := range ifs {
		for _, a := range i.Addrs {
			aip, _, err := net.ParseCIDR(a)
			if err != nil {
				aip = net.ParseIP(a)
			}
			if aip != nil && aip.Equal(ip) {
				return i.Name
			}
		}
	}
	return ""
}
