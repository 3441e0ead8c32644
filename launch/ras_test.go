package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The fixtures are built with NCCL's own format strings, each marked with
// the function of src/ras/client_support.cc (NVIDIA/nccl) that prints it.
// C's %ld and %016lx are Go's %d and %016x; the other verbs mean the same.

// rasPreamble is the start of every text report.
func rasPreamble(version string) string {
	return "" +
		// rasClientRunInit: "NCCL version " STR(NCCL_MAJOR) "." STR(NCCL_MINOR) "." STR(NCCL_PATCH) NCCL_SUFFIX
		//                   " compiled with CUDA " STR(CUDA_MAJOR) "." STR(CUDA_MINOR) "\n"
		fmt.Sprintf("NCCL version %s compiled with CUDA %s\n", version, "12.8") +
		// rasClientRunInit: "CUDA runtime version %d, driver version %d\n\n"
		fmt.Sprintf("CUDA runtime version %d, driver version %d\n\n", 12080, 12090)
}

// rasJobSummary is the job summary of a job whose nodes are alike.
func rasJobSummary(nodes, perNode, gpusPerProcess int) string {
	return "" +
		// rasClientRunInit: "Job summary\n===========\n\n"
		"Job summary\n===========\n\n" +
		// rasClientRunInit: "  Nodes  Processes         GPUs  Processes     GPUs\n"
		//                   "(total)   per node  per process    (total)  (total)\n"
		//                   "%7d" "  %9d" "  %11d" "  %9d" "  %7d\n"
		fmt.Sprintf("  Nodes  Processes         GPUs  Processes     GPUs\n"+
			"(total)   per node  per process    (total)  (total)\n"+
			"%7d  %9d  %11d  %9d  %7d\n",
			nodes, perNode, gpusPerProcess, nodes*perNode, nodes*perNode*gpusPerProcess)
}

// rasCommunicators starts the communicators part: secs is the format NCCL
// prints the gathering time with, "%.3f" (2.26 and later) or "%.2f".
func rasCommunicators(secs string) string {
	return "" +
		// rasClientRunInit: "\nCommunicators..."
		"\nCommunicators..." +
		// rasClientRunComms: " (%.3fs)\n=============\n\n"
		fmt.Sprintf(" ("+secs+"s)\n=============\n\n", 0.0123) +
		// rasClientRunComms: "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n"
		//                    "    #  in group  per comm  per node  per comm  in group\n"
		"Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n" +
		"    #  in group  per comm  per node  per comm  in group\n"
}

// rasRow is a row of the communicators table.
func rasRow(group, comms, nodes int, perNode string, size, inGroup int, status, errs string) string {
	// rasClientRunComms: "%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s\n"
	return fmt.Sprintf("%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s\n", group, comms, nodes, perNode, size, inGroup, status, errs)
}

const (
	// rasClientRunComms: "\nErrors\n======\n\n"
	rasErrors = "\nErrors\n======\n\n"
	// rasClientRunComms: "Warnings\n========\n\n"
	rasWarnings = "Warnings\n========\n\n"
)

// rasSection starts the section about one communicator.
func rasSection(group, index int, hash uint64, kind string) string {
	// rasClientRunComms: "#%d-%d (%016lx) INCOMPLETE\n", "#%d-%d (%016lx) ERROR\n", "#%d-%d (%016lx) MISMATCH\n"
	return fmt.Sprintf("#%d-%d (%016x) %s\n", group, index, hash, kind)
}

// rasRankLine names a member of the group above it.
func rasRankLine(rank int, gpu string, pid int, node string) string {
	// rasClientRunComms, rasClientBreakDownErrors: "  Rank %d -- GPU %s managed by process %d on node %s\n"
	return fmt.Sprintf("  Rank %d -- GPU %s managed by process %d on node %s\n", rank, gpu, pid, node)
}

// rasOpCounts starts the counts of one collective type (2.26 and later).
func rasOpCounts(op string) string {
	// rasClientRunComms: "  Communicator ranks have different %s operation counts\n"
	return fmt.Sprintf("  Communicator ranks have different %s operation counts\n", op)
}

// rasGroupCount is a group of ranks at one count.
func rasGroupCount(n int, count uint64) string {
	// rasClientRunComms: "  %d ranks have launched up to operation %ld\n"
	return fmt.Sprintf("  %d ranks have launched up to operation %d\n", n, count)
}

// rasNormalReport is a healthy job on 4 nodes of 8 GPUs: a communicator of
// all 32 ranks and 8 of 4 ranks, one a node.
func rasNormalReport() string {
	return rasPreamble("2.26.2") + rasJobSummary(4, 8, 1) + rasCommunicators("%.3f") +
		rasRow(0, 1, 4, "8", 32, 32, "RUNNING", "OK") +
		rasRow(1, 8, 4, "1", 4, 32, "RUNNING", "OK") +
		rasErrors + rasWarnings
}

const rasLagHash = 0x3f2a9c17d4e8b605

// rasLaggingReport is a job of 8 ranks on 2 nodes in which rank 7 launched
// 4 AllReduces fewer than the others.
func rasLaggingReport() string {
	return rasPreamble("2.27.3") + rasJobSummary(2, 4, 1) + rasCommunicators("%.3f") +
		rasRow(0, 1, 2, "4", 8, 8, "RUNNING", "MISMATCH") +
		rasErrors + rasWarnings +
		rasSection(0, 0, rasLagHash, "MISMATCH") +
		rasOpCounts("AllReduce") +
		rasGroupCount(7, 64) +
		// rasClientRunComms: "  Rank %d has launched up to operation %ld -- GPU %s managed by process %d on node %s\n"
		fmt.Sprintf("  Rank %d has launched up to operation %d -- GPU %s managed by process %d on node %s\n",
			7, 60, "3", 41207, "10.0.0.2") +
		"\n" // rasClientRunComms: "\n" after each collective type
}

// rasJSONRank, rasJSONMissing and rasJSONComm describe a JSON fixture.
type rasJSONRank struct {
	rank       int
	host       string
	pid, dev   int
	init       int
	counts     [5]uint64 // Broadcast, Reduce, AllGather, ReduceScatter, AllReduce
	finalizing bool
}

type rasJSONMissing struct {
	rank               int
	host               string
	pid, dev           int
	unresponsive, dead bool
}

type rasJSONFixtureComm struct {
	hash    uint64
	size    int
	ranks   []rasJSONRank
	missing []rasJSONMissing
}

// rasJSONReport writes a JSON dump the way rasDumpCommsToJSON does, with
// the format strings of the json* functions it calls.
func rasJSONReport(comms ...rasJSONFixtureComm) string {
	var b strings.Builder
	out := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	// jsonWriteHeader
	out("{\n")
	out("  \"nccl_version\": \"%s\",\n", "2.29.1")
	out("  \"cuda_runtime_version\": %d,\n", 13000)
	out("  \"cuda_driver_version\": %d,\n", 13000)
	out("  \"timestamp\": \"%s\",\n", "2026-01-05 09:30:00")
	out("  \"communicators_count\": %d,\n", len(comms))
	out("  \"communicators\": [\n")
	for ci, c := range comms {
		// jsonStartCommunicator
		if ci > 0 {
			out(",\n")
		}
		out("    {\n")
		out("      \"hash\": \"0x%x\",\n", c.hash)
		out("      \"secondary_hash\": \"0x%x:0x%x\",\n", uint64(0x1111222233334444), uint64(0x5555666677778888))
		out("      \"size\": %d,\n", c.size)
		out("      \"ranks_count\": %d,\n", len(c.ranks))
		out("      \"missing_ranks_count\": %d,\n", len(c.missing))
		out("      \"ranks\": [\n")
		for ri, r := range c.ranks {
			// jsonWriteRankData
			if ri > 0 {
				out(",\n")
			}
			out("        {\n")
			out("          \"rank\": %d,\n", r.rank)
			out("          \"host\": \"%s\",\n", r.host)
			out("          \"pid\": %d,\n", r.pid)
			out("          \"cuda_dev\": %d,\n", r.dev)
			out("          \"nvml_dev\": %d,\n", r.dev)
			out("          \"status\": {\n")
			out("            \"init_state\": %d,\n", r.init)
			out("            \"async_error\": %d,\n", 0)
			out("            \"finalize_called\": %s,\n", fmt.Sprint(r.finalizing))
			out("            \"destroy_flag\": %s,\n", "false")
			out("            \"abort_flag\": %s\n", "false")
			out("          },\n")
			out("          \"collective_counts\": {\n")
			for op, name := range []string{"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"} {
				out("            \"%s\": %d", name, r.counts[op])
				if op < 4 {
					out(",")
				}
				out("\n")
			}
			out("          }\n")
			out("        }")
		}
		// jsonStartMissingRanks
		out("\n      ],\n")
		out("      \"missing_ranks\": [\n")
		for mi, m := range c.missing {
			// jsonWriteMissingRank
			if mi > 0 {
				out(",\n")
			}
			out("        {\n")
			out("          \"rank\": %d,\n", m.rank)
			out("          \"host\": \"%s\",\n", m.host)
			out("          \"pid\": %d,\n", m.pid)
			out("          \"cuda_dev\": %d,\n", m.dev)
			out("          \"nvml_dev\": %d,\n", m.dev)
			out("          \"status\": {\n")
			out("            \"unresponsive\": %s,\n", fmt.Sprint(m.unresponsive))
			out("            \"considered_dead\": %s\n", fmt.Sprint(m.dead))
			out("          }\n")
			out("        }")
		}
		// jsonEndCommunicator
		out("\n      ]\n")
		out("    }")
	}
	// jsonWriteFooter
	out("\n  ],\n")
	out("  \"ras\": {\n")
	out("    \"collection_time_sec\": %.3f,\n", 0.002)
	out("    \"timeouts_count\": %d\n", 0)
	out("  }\n")
	out("}\n")
	return b.String()
}

// rasJSONLagging is a 4-rank job in which rank 2 is an AllReduce behind,
// and a communicator of ranks 1 and 3 in which rank 3 (its rank 1) is a
// Broadcast behind.
func rasJSONLagging() string {
	return rasJSONReport(
		rasJSONFixtureComm{hash: 0x5eed1e55c0de0001, size: 4, ranks: []rasJSONRank{
			{rank: 0, host: "10.0.0.1", pid: 100, dev: 0, counts: [5]uint64{1, 0, 0, 0, 10}},
			{rank: 1, host: "10.0.0.1", pid: 101, dev: 1, counts: [5]uint64{1, 0, 0, 0, 10}},
			{rank: 2, host: "10.0.0.2", pid: 102, dev: 0, counts: [5]uint64{1, 0, 0, 0, 9}},
			{rank: 3, host: "10.0.0.2", pid: 103, dev: 1, counts: [5]uint64{1, 0, 0, 0, 10}},
		}},
		rasJSONFixtureComm{hash: 0x2, size: 2, ranks: []rasJSONRank{
			{rank: 0, host: "10.0.0.1", pid: 101, dev: 1, counts: [5]uint64{5, 0, 0, 0, 0}},
			{rank: 1, host: "10.0.0.2", pid: 103, dev: 1, counts: [5]uint64{4, 0, 0, 0, 0}},
		}},
	)
}

func TestParseRAS(t *testing.T) {
	lagging := rasLaggingReport()
	jsonLagging := rasJSONLagging()
	cases := []struct {
		name        string
		text        string
		wantVersion string
		wantDone    bool // Complete
		wantComms   int
		wantLagging []int
		wantTotal   uint64
		wantExact   bool
		check       func(t *testing.T, r RASReport)
	}{{
		name:        "normal job",
		text:        rasNormalReport(),
		wantVersion: "2.26.2",
		wantDone:    true,
		wantComms:   9,
		check: func(t *testing.T, r RASReport) {
			if r.Nodes != 4 || r.Processes != 32 || r.GPUs != 32 {
				t.Errorf("job summary = %d nodes, %d processes, %d GPUs; want 4, 32, 32", r.Nodes, r.Processes, r.GPUs)
			}
			want := RASComm{Label: "#1-7", Size: 4, Nodes: 4, Status: "RUNNING", Errors: "OK"}
			if !reflect.DeepEqual(r.Comms[8], want) {
				t.Errorf("Comms[8] = %+v, want %+v", r.Comms[8], want)
			}
			if r.Comms[0].Size != 32 || r.Comms[0].Label != "#0-0" {
				t.Errorf("Comms[0] = %+v, want #0-0 of 32 ranks", r.Comms[0])
			}
		},
	}, {
		name:        "one lagging rank",
		text:        lagging,
		wantVersion: "2.27.3",
		wantDone:    true,
		wantComms:   1,
		wantLagging: []int{7},
		wantTotal:   7*64 + 60,
		check: func(t *testing.T, r RASReport) {
			want := RASComm{
				Label: "#0-0", Hash: "3f2a9c17d4e8b605", Size: 8, Nodes: 2, Status: "RUNNING", Errors: "MISMATCH",
				Counts: []RASCount{
					{Op: "AllReduce", Count: 64, NRanks: 7},
					{Op: "AllReduce", Count: 60, NRanks: 1, Ranks: []int{7}},
				},
				Ranks: []RASRank{{Rank: 7, Node: "10.0.0.2", PID: 41207, GPU: "3"}},
			}
			if !reflect.DeepEqual(r.Comms[0], want) {
				t.Errorf("Comms[0] =\n%+v\nwant\n%+v", r.Comms[0], want)
			}
		},
	}, {
		name: "lagging ranks before NCCL 2.26",
		text: rasPreamble("2.24.3") + rasJobSummary(4, 8, 1) + rasCommunicators("%.2f") +
			rasRow(0, 1, 4, "8", 32, 32, "RUNNING", "MISMATCH") +
			rasErrors + rasWarnings +
			rasSection(0, 0, 0x0d15ea5e0ddba110, "MISMATCH") +
			// rasClientRunComms (2.24, 2.25): "  Communicator ranks have different collective operation counts\n"
			"  Communicator ranks have different collective operation counts\n" +
			rasGroupCount(26, 6650) + rasGroupCount(6, 6649) +
			rasRankLine(3, "3", 21003, "10.1.0.1") + rasRankLine(11, "3", 22011, "10.1.0.2") +
			rasRankLine(19, "3", 23019, "10.1.0.3") + rasRankLine(27, "3", 24027, "10.1.0.4") +
			rasRankLine(30, "6 (NVML 7)", 24030, "10.1.0.4") + rasRankLine(31, "7", 24031, "10.1.0.4") +
			"\n",
		wantVersion: "2.24.3",
		wantDone:    true,
		wantComms:   1,
		wantLagging: []int{3, 11, 19, 27, 30, 31},
		wantTotal:   26*6650 + 6*6649,
		check: func(t *testing.T, r RASReport) {
			rk, ok := r.Comms[0].rank(30)
			if want := (RASRank{Rank: 30, Node: "10.1.0.4", PID: 24030, GPU: "6 (NVML 7)"}); !ok || rk != want {
				t.Errorf("rank 30 = %+v, want %+v", rk, want)
			}
			if c := r.Comms[0].Counts; len(c) != 2 || c[0].Op != "collective" {
				t.Errorf("Counts = %+v, want two groups of all collectives", c)
			}
		},
	}, {
		name: "an unresponsive process",
		text: rasPreamble("2.27.3") + rasJobSummary(4, 8, 1) + rasCommunicators("%.3f") +
			rasRow(0, 1, 4, "7-8", 32, 31, "RUNNING", "INCOMPLETE") +
			rasErrors +
			// rasClientRunComms: "INCOMPLETE\n  Missing communicator data from %d job process%s\n"
			fmt.Sprintf("INCOMPLETE\n  Missing communicator data from %d job process%s\n", 1, "") +
			// rasClientRunComms: "  Process %d on node %s managing GPU%s %s\n"
			fmt.Sprintf("  Process %d on node %s managing GPU%s %s\n", 33021, "10.1.0.3", "", "5") +
			"\n" +
			// rasClientRunComms: "DEAD\n  %d job process%s considered dead (unreachable via the RAS network)\n"
			fmt.Sprintf("DEAD\n  %d job process%s considered dead (unreachable via the RAS network)\n", 1, " is") +
			fmt.Sprintf("  Process %d on node %s managing GPU%s %s\n", 34001, "10.1.0.4", "s", "2,3") +
			"\n" +
			rasSection(0, 0, 0x6a1b2c3d4e5f6071, "INCOMPLETE") +
			// rasClientRunComms: "  Missing communicator data from %d rank%s\n"
			fmt.Sprintf("  Missing communicator data from %d rank%s\n", 1, "") +
			rasRankLine(21, "5", 33021, "10.1.0.3") +
			"\n" +
			rasWarnings +
			// rasClientRunComms: "TIMEOUT\n  Encountered %d communication timeout%s while gathering communicator data\n\n"
			fmt.Sprintf("TIMEOUT\n  Encountered %d communication timeout%s while gathering communicator data\n\n", 2, "s"),
		wantVersion: "2.27.3",
		wantDone:    true,
		wantComms:   1,
		wantLagging: []int{21},
		check: func(t *testing.T, r RASReport) {
			want := []RASProcess{
				{PID: 33021, Node: "10.1.0.3", GPUs: "5"},
				{PID: 34001, Node: "10.1.0.4", GPUs: "2,3", Dead: true},
			}
			if !reflect.DeepEqual(r.Unreachable, want) {
				t.Errorf("Unreachable = %+v, want %+v", r.Unreachable, want)
			}
			if r.MissingProcesses != 1 || r.DeadProcesses != 1 || r.Timeouts != 2 {
				t.Errorf("missing %d, dead %d, timeouts %d; want 1, 1, 2", r.MissingProcesses, r.DeadProcesses, r.Timeouts)
			}
		},
	}, {
		name: "missing ranks before NCCL 2.26",
		text: rasPreamble("2.25.1") + rasCommunicators("%.2f") +
			rasRow(0, 1, 2, "4", 8, 6, "RUNNING", "INCOMPLETE") +
			rasErrors +
			rasSection(0, 0, 0x1, "INCOMPLETE") +
			fmt.Sprintf("  Missing communicator data from %d rank%s\n", 2, "s") +
			// rasClientRunComms (2.24, 2.25): "  The missing rank%s: %s\n"
			fmt.Sprintf("  The missing rank%s: %s\n", "s", "5,6") +
			"\n" + rasWarnings,
		wantVersion: "2.25.1",
		wantDone:    true,
		wantComms:   1,
		wantLagging: []int{5, 6},
	}, {
		name: "a rank still initializing",
		text: rasPreamble("2.27.3") + rasCommunicators("%.3f") +
			rasRow(0, 1, 2, "8", 16, 16, "RUNNING", "MISMATCH") +
			rasErrors + rasWarnings +
			rasSection(0, 0, 0x1badb002cafef00d, "MISMATCH") +
			// rasClientRunComms: "  Communicator ranks have different status\n"
			"  Communicator ranks have different status\n" +
			// rasClientRunComms: "  %d ranks have status %s\n"
			fmt.Sprintf("  %d ranks have status %s\n", 15, "RUNNING") +
			// rasClientRunComms: "  Rank %d has status %s -- GPU %s managed by process %d on node %s\n"
			fmt.Sprintf("  Rank %d has status %s -- GPU %s managed by process %d on node %s\n", 9, "INIT", "1", 5009, "10.0.0.2"),
		wantVersion: "2.27.3",
		wantDone:    true,
		wantComms:   1,
		wantLagging: []int{9},
	}, {
		name: "a failed rank is not a lagging one",
		text: rasPreamble("2.27.3") + rasCommunicators("%.3f") +
			rasRow(0, 1, 2, "4", 8, 8, "RUNNING", "ERROR") +
			rasErrors +
			rasSection(0, 0, 0x5, "ERROR") +
			// rasClientRunComms: "  Asynchronous error%s on %d rank%s\n"
			fmt.Sprintf("  Asynchronous error%s on %d rank%s\n", "", 1, "") +
			// rasClientBreakDownErrors: "  Rank %d reported %s -- GPU %s managed by process %d on node %s\n"
			fmt.Sprintf("  Rank %d reported %s -- GPU %s managed by process %d on node %s\n", 3, "Remote process error", "3", 4003, "10.0.0.1") +
			"\n" + rasWarnings,
		wantVersion: "2.27.3",
		wantDone:    true,
		wantComms:   1,
		check: func(t *testing.T, r RASReport) {
			if !slices.Equal(r.Comms[0].Failed, []int{3}) {
				t.Errorf("Failed = %v, want [3]", r.Comms[0].Failed)
			}
		},
	}, {
		name:     "empty",
		text:     "",
		wantDone: false,
	}, {
		name: "garbage",
		text: "ERROR: Unknown command STATUSS\n\x00\xff\xfe binary\nGroup\n#x-y (zz) MISMATCH\n  Rank 3\n" +
			"    0  99999999999999999999  1  1  1  1  RUNNING  OK\n",
	}, {
		name: "garbage that looks like JSON",
		text: `{"communicators": [{"hash": 7, "ranks": "no"}]`,
	}, {
		name:        "cut short while RAS gathers its data",
		text:        rasPreamble("2.27.3") + rasJobSummary(2, 4, 1) + "\nCommunicators...",
		wantVersion: "2.27.3",
		check: func(t *testing.T, r RASReport) {
			if r.Nodes != 2 || r.Processes != 8 {
				t.Errorf("job summary = %d nodes, %d processes; want 2, 8", r.Nodes, r.Processes)
			}
		},
	}, {
		// The cut "Rank 7 has launched up to operation 6" must not read as a
		// rank at operation 6.
		name:        "cut short in a line",
		text:        lagging[:strings.Index(lagging, "operation 60")+len("operation 6")],
		wantVersion: "2.27.3",
		wantComms:   1,
		wantTotal:   7 * 64,
	}, {
		name:        "JSON, every rank alike",
		text:        rasJSONReport(rasJSONFixtureComm{hash: 0x5eed1e55c0de0001, size: 2, ranks: []rasJSONRank{{rank: 0, host: "10.0.0.1", pid: 7, counts: [5]uint64{1, 0, 2, 0, 30}}, {rank: 1, host: "10.0.0.1", pid: 8, dev: 1, counts: [5]uint64{1, 0, 2, 0, 30}}}}),
		wantVersion: "2.29.1",
		wantDone:    true,
		wantComms:   1,
		wantTotal:   2 * 33,
		wantExact:   true,
		check: func(t *testing.T, r RASReport) {
			c := r.Comms[0]
			if c.Hash != "5eed1e55c0de0001" || c.Status != "RUNNING" || c.Errors != "OK" || c.Nodes != 1 || c.Size != 2 {
				t.Errorf("Comms[0] = %+v", c)
			}
		},
	}, {
		name:        "JSON, a lagging rank and one of a smaller communicator",
		text:        jsonLagging,
		wantVersion: "2.29.1",
		wantDone:    true,
		wantComms:   2,
		wantLagging: []int{2, 3},
		wantTotal:   4*1 + 3*10 + 9 + 5 + 4,
		wantExact:   true,
		check: func(t *testing.T, r RASReport) {
			if got := r.Comms[1].Lagging(); !slices.Equal(got, []int{1}) {
				t.Errorf("Comms[1].Lagging() = %v, want its rank 1", got)
			}
			if r.Comms[0].Errors != "MISMATCH" || r.Comms[0].Nodes != 2 {
				t.Errorf("Comms[0] = %+v, want a MISMATCH on 2 nodes", r.Comms[0])
			}
		},
	}, {
		name: "JSON, an unresponsive rank",
		text: rasJSONReport(rasJSONFixtureComm{hash: 0x9, size: 2,
			ranks:   []rasJSONRank{{rank: 0, host: "10.1.0.9", pid: 51001}},
			missing: []rasJSONMissing{{rank: 1, host: "10.1.0.9", pid: 51002, dev: 1, unresponsive: true}}}),
		wantVersion: "2.29.1",
		wantDone:    true,
		wantComms:   1,
		wantLagging: []int{1},
		wantExact:   true,
		check: func(t *testing.T, r RASReport) {
			if r.Comms[0].Errors != "INCOMPLETE" || r.MissingProcesses != 1 || len(r.Unreachable) != 1 || r.Unreachable[0].PID != 51002 {
				t.Errorf("report = %+v, want an INCOMPLETE communicator and process 51002 unreachable", r)
			}
		},
	}, {
		name: "JSON, ranks finishing",
		text: rasJSONReport(rasJSONFixtureComm{hash: 0x9, size: 3,
			ranks: []rasJSONRank{{rank: 0, pid: 1, host: "h"}, {rank: 1, pid: 2, host: "h", dev: 1}, {rank: 2, pid: 3, host: "h", dev: 2, finalizing: true}}}),
		wantVersion: "2.29.1",
		wantDone:    true,
		wantComms:   1,
		wantLagging: []int{2},
		wantExact:   true,
		check: func(t *testing.T, r RASReport) {
			if c := r.Comms[0]; c.Status != "FINALIZE" || c.Errors != "MISMATCH" {
				t.Errorf("status %s, errors %s; want FINALIZE, MISMATCH", c.Status, c.Errors)
			}
		},
	}, {
		name:        "JSON cut short",
		text:        jsonLagging[:strings.Index(jsonLagging, `"hash": "0x2"`)+5],
		wantVersion: "2.29.1",
		wantComms:   1,
		wantLagging: []int{2},
		wantTotal:   4*1 + 3*10 + 9,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := ParseRAS(tc.text)
			if r.NCCLVersion != tc.wantVersion {
				t.Errorf("NCCLVersion = %q, want %q", r.NCCLVersion, tc.wantVersion)
			}
			if r.Complete != tc.wantDone {
				t.Errorf("Complete = %v, want %v", r.Complete, tc.wantDone)
			}
			if len(r.Comms) != tc.wantComms {
				t.Fatalf("%d communicators, want %d: %+v", len(r.Comms), tc.wantComms, r.Comms)
			}
			if got := r.Lagging(); !slices.Equal(got, tc.wantLagging) {
				t.Errorf("Lagging() = %v, want %v", got, tc.wantLagging)
			}
			if total, exact := r.TotalCollectives(); total != tc.wantTotal || exact != tc.wantExact {
				t.Errorf("TotalCollectives() = %d, %v; want %d, %v", total, exact, tc.wantTotal, tc.wantExact)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

func FuzzParseRAS(f *testing.F) {
	f.Add(rasNormalReport())
	f.Add(rasLaggingReport())
	f.Add(rasJSONLagging())
	f.Add("Group\n1 2 3 4 5 6 7 8\n")
	f.Fuzz(func(t *testing.T, text string) {
		r := ParseRAS(text)
		lag := r.Lagging()
		if !slices.IsSorted(lag) || len(slices.Compact(slices.Clone(lag))) != len(lag) {
			t.Errorf("Lagging() = %v, not sorted and unique", lag)
		}
		r.TotalCollectives()
	})
}

// fakeRAS is how a fake RAS server behaves.
type fakeRAS struct {
	hello string // the answer to CLIENT PROTOCOL
	json  bool   // it knows SET FORMAT json
	// stall, when >= 0, is how many bytes of the report it sends before it
	// stops answering; -1 sends it all.
	stall int
}

// serveRAS runs s on a loopback port for one connection and returns its
// address and the commands it receives.
func serveRAS(t *testing.T, s fakeRAS, text, jsonText string) (addr string, cmds <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 16)
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		ln.Close()
	})
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		context.AfterFunc(t.Context(), func() { conn.Close() })
		br := bufio.NewReader(conn)
		report := text
		answer := func(line string) { io.WriteString(conn, line+"\n") }
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			cmd := strings.TrimRight(line, "\r\n")
			got <- cmd
			// The commands and answers of rasClientEventLoop.
			switch {
			case strings.HasPrefix(cmd, "CLIENT PROTOCOL "):
				answer(s.hello)
			case strings.HasPrefix(cmd, "TIMEOUT "):
				answer("OK")
			case cmd == "SET FORMAT json" && s.json:
				report = jsonText
				answer("OK")
			case cmd == "STATUS" || cmd == "VERBOSE STATUS":
				b := []byte(report)
				if s.stall >= 0 {
					b = b[:s.stall]
				}
				// NCCL sends the report in pieces as it gathers the data
				// (rasClientEnqueueMsg), then closes the connection.
				for len(b) > 0 {
					n := min(len(b), 97)
					if _, err := conn.Write(b[:n]); err != nil {
						return
					}
					b = b[n:]
				}
				if s.stall >= 0 {
					<-done
				}
				return
			default:
				answer("ERROR: Unknown command " + cmd)
			}
		}
	}()
	return ln.Addr().String(), got
}

func TestQueryRAS(t *testing.T) {
	text, jsonText := rasLaggingReport(), rasJSONLagging()
	communicators := strings.Index(text, "\nCommunicators...") + len("\nCommunicators...")
	ok := fakeRAS{hello: "SERVER PROTOCOL 2", stall: -1}
	cases := []struct {
		name        string
		server      fakeRAS
		json        bool
		verbose     bool
		timeout     time.Duration // of ctx; 0 for none
		cancelAfter time.Duration // cancels ctx
		wantCmds    []string
		wantReport  string
		wantErr     error  // matched with errors.Is
		wantErrText string // in the error's text
	}{{
		name:       "status",
		server:     ok,
		wantCmds:   []string{"CLIENT PROTOCOL 2", "STATUS"},
		wantReport: text,
	}, {
		name:       "verbose status",
		server:     ok,
		verbose:    true,
		wantCmds:   []string{"CLIENT PROTOCOL 2", "VERBOSE STATUS"},
		wantReport: text,
	}, {
		name:       "json",
		server:     fakeRAS{hello: "SERVER PROTOCOL 2", json: true, stall: -1},
		json:       true,
		wantCmds:   []string{"CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"},
		wantReport: jsonText,
	}, {
		name:       "json asked of a server before 2.28.7",
		server:     ok,
		json:       true,
		wantCmds:   []string{"CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"},
		wantReport: text,
	}, {
		name:       "a deadline too short for NCCL's own timeout",
		server:     ok,
		timeout:    5 * time.Second,
		wantCmds:   []string{"CLIENT PROTOCOL 2", "TIMEOUT 1", "STATUS"},
		wantReport: text,
	}, {
		name:       "a deadline long enough",
		server:     ok,
		timeout:    time.Minute,
		wantCmds:   []string{"CLIENT PROTOCOL 2", "STATUS"},
		wantReport: text,
	}, {
		name:        "no report before the deadline",
		server:      fakeRAS{hello: "SERVER PROTOCOL 2", stall: 0},
		timeout:     300 * time.Millisecond,
		wantCmds:    []string{"CLIENT PROTOCOL 2", "TIMEOUT 1", "STATUS"},
		wantErr:     context.DeadlineExceeded,
		wantErrText: "nccl ras at 127.0.0.1:",
	}, {
		name:        "report cut short by the deadline",
		server:      fakeRAS{hello: "SERVER PROTOCOL 2", stall: communicators},
		timeout:     300 * time.Millisecond,
		wantCmds:    []string{"CLIENT PROTOCOL 2", "TIMEOUT 1", "STATUS"},
		wantReport:  text[:communicators],
		wantErr:     context.DeadlineExceeded,
		wantErrText: "read report",
	}, {
		name:        "cancelled",
		server:      fakeRAS{hello: "SERVER PROTOCOL 2", stall: 0},
		cancelAfter: 100 * time.Millisecond,
		wantCmds:    []string{"CLIENT PROTOCOL 2", "STATUS"},
		wantErr:     context.Canceled,
	}, {
		name:        "not a RAS server",
		server:      fakeRAS{hello: "SSH-2.0-OpenSSH_9.6", stall: -1},
		wantCmds:    []string{"CLIENT PROTOCOL 2"},
		wantErrText: `unexpected answer "SSH-2.0-OpenSSH_9.6" to CLIENT PROTOCOL 2`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr, cmds := serveRAS(t, tc.server, text, jsonText)
			ctx := t.Context()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			if tc.cancelAfter > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(tc.cancelAfter, cancel)
			}
			var got string
			var err error
			if tc.json {
				got, err = QueryRASJSON(ctx, addr)
			} else {
				got, err = QueryRAS(ctx, addr, tc.verbose)
			}
			for i, want := range tc.wantCmds {
				select {
				case cmd := <-cmds:
					if cmd != want {
						t.Errorf("command %d = %q, want %q", i, cmd, want)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("command %d never came, want %q", i, want)
				}
			}
			select {
			case cmd := <-cmds:
				t.Errorf("unexpected command %q", cmd)
			default:
			}
			if got != tc.wantReport {
				t.Errorf("report =\n%s\nwant\n%s", got, tc.wantReport)
			}
			switch {
			case tc.wantErr == nil && tc.wantErrText == "":
				if err != nil {
					t.Fatalf("QueryRAS: %v", err)
				}
			case err == nil:
				t.Fatalf("QueryRAS succeeded, want an error")
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("error %v is not %v", err, tc.wantErr)
			case !strings.Contains(err.Error(), tc.wantErrText):
				t.Errorf("error %q does not say %q", err, tc.wantErrText)
			}
		})
	}
}

func TestQueryRASNobodyListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = QueryRAS(t.Context(), addr, false)
	if err == nil || !strings.HasPrefix(err.Error(), "nccl ras at "+addr+": ") {
		t.Errorf("QueryRAS of a closed port: %v, want an error naming %s", err, addr)
	}
}

func TestQueryRASDefaultAddr(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := QueryRAS(ctx, "", false)
	if err == nil {
		t.Skip("something answers at " + DefaultRASAddr)
	}
	if !strings.HasPrefix(err.Error(), "nccl ras at "+DefaultRASAddr+": ") {
		t.Errorf("error %q does not name %s", err, DefaultRASAddr)
	}
}
