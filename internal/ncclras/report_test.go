package ncclras

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The fixtures are built with NCCL's own format strings, each marked with
// the function of src/ras/client_support.cc (NVIDIA/nccl) that prints it.
// C's %ld and %016lx are Go's %d and %016x; the other verbs mean the same.

// textPreamble is the start of every text report.
func textPreamble(version string) string {
	return "" +
		// rasClientRunInit: "NCCL version " STR(NCCL_MAJOR) "." STR(NCCL_MINOR) "." STR(NCCL_PATCH) NCCL_SUFFIX
		//                   " compiled with CUDA " STR(CUDA_MAJOR) "." STR(CUDA_MINOR) "\n"
		fmt.Sprintf("NCCL version %s compiled with CUDA %s\n", version, "12.8") +
		// rasClientRunInit: "CUDA runtime version %d, driver version %d\n\n"
		fmt.Sprintf("CUDA runtime version %d, driver version %d\n\n", 12080, 12090)
}

// textJobSummary is the job summary of a job whose nodes are alike.
func textJobSummary(nodes, perNode, gpusPerProcess int) string {
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

// textCommunicators starts the communicators part: secs is the format NCCL
// prints the gathering time with, "%.3f" (2.26 and later) or "%.2f".
func textCommunicators(secs string) string {
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

// textRow is a row of the communicators table.
func textRow(group, comms, nodes int, perNode string, size, inGroup int, status, errs string) string {
	// rasClientRunComms: "%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s\n"
	return fmt.Sprintf("%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s\n", group, comms, nodes, perNode, size, inGroup, status, errs)
}

const (
	// rasClientRunComms: "\nErrors\n======\n\n"
	textErrors = "\nErrors\n======\n\n"
	// rasClientRunComms: "Warnings\n========\n\n"
	textWarnings = "Warnings\n========\n\n"
)

// textSection starts the section about one communicator.
func textSection(group, index int, hash uint64, kind string) string {
	// rasClientRunComms: "#%d-%d (%016lx) INCOMPLETE\n", "#%d-%d (%016lx) ERROR\n", "#%d-%d (%016lx) MISMATCH\n"
	return fmt.Sprintf("#%d-%d (%016x) %s\n", group, index, hash, kind)
}

// textRankLine names a member of the group above it.
func textRankLine(rank int, gpu string, pid int, node string) string {
	// rasClientRunComms, rasClientBreakDownErrors: "  Rank %d -- GPU %s managed by process %d on node %s\n"
	return fmt.Sprintf("  Rank %d -- GPU %s managed by process %d on node %s\n", rank, gpu, pid, node)
}

// textOpCounts starts the counts of one collective type (2.26 and later).
func textOpCounts(op string) string {
	// rasClientRunComms: "  Communicator ranks have different %s operation counts\n"
	return fmt.Sprintf("  Communicator ranks have different %s operation counts\n", op)
}

// textGroupCount is a group of ranks at one count.
func textGroupCount(n int, count uint64) string {
	// rasClientRunComms: "  %d ranks have launched up to operation %ld\n"
	return fmt.Sprintf("  %d ranks have launched up to operation %d\n", n, count)
}

// normalReport is a healthy job on 4 nodes of 8 GPUs: a communicator of
// all 32 ranks and 8 of 4 ranks, one a node.
func normalReport() string {
	return textPreamble("2.26.2") + textJobSummary(4, 8, 1) + textCommunicators("%.3f") +
		textRow(0, 1, 4, "8", 32, 32, "RUNNING", "OK") +
		textRow(1, 8, 4, "1", 4, 32, "RUNNING", "OK") +
		textErrors + textWarnings
}

const lagHash = 0x3f2a9c17d4e8b605

// laggingReport is a job of 8 ranks on 2 nodes in which rank 7 launched
// 4 AllReduces fewer than the others.
func laggingReport() string {
	return textPreamble("2.27.3") + textJobSummary(2, 4, 1) + textCommunicators("%.3f") +
		textRow(0, 1, 2, "4", 8, 8, "RUNNING", "MISMATCH") +
		textErrors + textWarnings +
		textSection(0, 0, lagHash, "MISMATCH") +
		textOpCounts("AllReduce") +
		textGroupCount(7, 64) +
		// rasClientRunComms: "  Rank %d has launched up to operation %ld -- GPU %s managed by process %d on node %s\n"
		fmt.Sprintf("  Rank %d has launched up to operation %d -- GPU %s managed by process %d on node %s\n",
			7, 60, "3", 41207, "10.0.0.2") +
		"\n" // rasClientRunComms: "\n" after each collective type
}

// fixtureRank, fixtureMissing and fixtureComm describe a JSON fixture.
type fixtureRank struct {
	rank       int
	host       string
	pid, dev   int
	init       int
	counts     [5]uint64 // Broadcast, Reduce, AllGather, ReduceScatter, AllReduce
	finalizing bool
}

type fixtureMissing struct {
	rank               int
	host               string
	pid, dev           int
	unresponsive, dead bool
}

type fixtureComm struct {
	hash    uint64
	size    int
	ranks   []fixtureRank
	missing []fixtureMissing
}

// jsonReport writes a JSON dump the way rasDumpCommsToJSON does, with
// the format strings of the json* functions it calls.
func jsonReport(comms ...fixtureComm) string {
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

// jsonLagging is a 4-rank job in which rank 2 is an AllReduce behind,
// and a communicator of ranks 1 and 3 in which rank 3 (its rank 1) is a
// Broadcast behind.
func jsonLagging() string {
	return jsonReport(
		fixtureComm{hash: 0x5eed1e55c0de0001, size: 4, ranks: []fixtureRank{
			{rank: 0, host: "10.0.0.1", pid: 100, dev: 0, counts: [5]uint64{1, 0, 0, 0, 10}},
			{rank: 1, host: "10.0.0.1", pid: 101, dev: 1, counts: [5]uint64{1, 0, 0, 0, 10}},
			{rank: 2, host: "10.0.0.2", pid: 102, dev: 0, counts: [5]uint64{1, 0, 0, 0, 9}},
			{rank: 3, host: "10.0.0.2", pid: 103, dev: 1, counts: [5]uint64{1, 0, 0, 0, 10}},
		}},
		fixtureComm{hash: 0x2, size: 2, ranks: []fixtureRank{
			{rank: 0, host: "10.0.0.1", pid: 101, dev: 1, counts: [5]uint64{5, 0, 0, 0, 0}},
			{rank: 1, host: "10.0.0.2", pid: 103, dev: 1, counts: [5]uint64{4, 0, 0, 0, 0}},
		}},
	)
}

func TestParse(t *testing.T) {
	lagging := laggingReport()
	jsonLagging := jsonLagging()
	cases := []struct {
		name        string
		text        string
		wantVersion string
		wantDone    bool // Complete
		wantComms   int
		wantLagging []int
		wantTotal   uint64
		wantExact   bool
		check       func(t *testing.T, r Report)
	}{{
		name:        "normal job",
		text:        normalReport(),
		wantVersion: "2.26.2",
		wantDone:    true,
		wantComms:   9,
		check: func(t *testing.T, r Report) {
			if r.Nodes != 4 || r.Processes != 32 || r.GPUs != 32 {
				t.Errorf("job summary = %d nodes, %d processes, %d GPUs; want 4, 32, 32", r.Nodes, r.Processes, r.GPUs)
			}
			want := Comm{Label: "#1-7", Size: 4, Nodes: 4, Status: "RUNNING", Errors: "OK"}
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
		check: func(t *testing.T, r Report) {
			want := Comm{
				Label: "#0-0", Hash: "3f2a9c17d4e8b605", Size: 8, Nodes: 2, Status: "RUNNING", Errors: "MISMATCH",
				Counts: []Count{
					{Op: "AllReduce", Count: 64, NRanks: 7},
					{Op: "AllReduce", Count: 60, NRanks: 1, Ranks: []int{7}},
				},
				Ranks: []Rank{{Rank: 7, Node: "10.0.0.2", PID: 41207, GPU: "3"}},
			}
			if !reflect.DeepEqual(r.Comms[0], want) {
				t.Errorf("Comms[0] =\n%+v\nwant\n%+v", r.Comms[0], want)
			}
		},
	}, {
		name: "lagging ranks before NCCL 2.26",
		text: textPreamble("2.24.3") + textJobSummary(4, 8, 1) + textCommunicators("%.2f") +
			textRow(0, 1, 4, "8", 32, 32, "RUNNING", "MISMATCH") +
			textErrors + textWarnings +
			textSection(0, 0, 0x0d15ea5e0ddba110, "MISMATCH") +
			// rasClientRunComms (2.24, 2.25): "  Communicator ranks have different collective operation counts\n"
			"  Communicator ranks have different collective operation counts\n" +
			textGroupCount(26, 6650) + textGroupCount(6, 6649) +
			textRankLine(3, "3", 21003, "10.1.0.1") + textRankLine(11, "3", 22011, "10.1.0.2") +
			textRankLine(19, "3", 23019, "10.1.0.3") + textRankLine(27, "3", 24027, "10.1.0.4") +
			textRankLine(30, "6 (NVML 7)", 24030, "10.1.0.4") + textRankLine(31, "7", 24031, "10.1.0.4") +
			"\n",
		wantVersion: "2.24.3",
		wantDone:    true,
		wantComms:   1,
		wantLagging: []int{3, 11, 19, 27, 30, 31},
		wantTotal:   26*6650 + 6*6649,
		check: func(t *testing.T, r Report) {
			rk, ok := r.Comms[0].rank(30)
			if want := (Rank{Rank: 30, Node: "10.1.0.4", PID: 24030, GPU: "6 (NVML 7)"}); !ok || rk != want {
				t.Errorf("rank 30 = %+v, want %+v", rk, want)
			}
			if c := r.Comms[0].Counts; len(c) != 2 || c[0].Op != "collective" {
				t.Errorf("Counts = %+v, want two groups of all collectives", c)
			}
		},
	}, {
		name: "an unresponsive process",
		text: textPreamble("2.27.3") + textJobSummary(4, 8, 1) + textCommunicators("%.3f") +
			textRow(0, 1, 4, "7-8", 32, 31, "RUNNING", "INCOMPLETE") +
			textErrors +
			// rasClientRunComms: "INCOMPLETE\n  Missing communicator data from %d job process%s\n"
			fmt.Sprintf("INCOMPLETE\n  Missing communicator data from %d job process%s\n", 1, "") +
			// rasClientRunComms: "  Process %d on node %s managing GPU%s %s\n"
			fmt.Sprintf("  Process %d on node %s managing GPU%s %s\n", 33021, "10.1.0.3", "", "5") +
			"\n" +
			// rasClientRunComms: "DEAD\n  %d job process%s considered dead (unreachable via the RAS network)\n"
			fmt.Sprintf("DEAD\n  %d job process%s considered dead (unreachable via the RAS network)\n", 1, " is") +
			fmt.Sprintf("  Process %d on node %s managing GPU%s %s\n", 34001, "10.1.0.4", "s", "2,3") +
			"\n" +
			textSection(0, 0, 0x6a1b2c3d4e5f6071, "INCOMPLETE") +
			// rasClientRunComms: "  Missing communicator data from %d rank%s\n"
			fmt.Sprintf("  Missing communicator data from %d rank%s\n", 1, "") +
			textRankLine(21, "5", 33021, "10.1.0.3") +
			"\n" +
			textWarnings +
			// rasClientRunComms: "TIMEOUT\n  Encountered %d communication timeout%s while gathering communicator data\n\n"
			fmt.Sprintf("TIMEOUT\n  Encountered %d communication timeout%s while gathering communicator data\n\n", 2, "s"),
		wantVersion: "2.27.3",
		wantDone:    true,
		wantComms:   1,
		wantLagging: []int{21},
		check: func(t *testing.T, r Report) {
			want := []Process{
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
		text: textPreamble("2.25.1") + textCommunicators("%.2f") +
			textRow(0, 1, 2, "4", 8, 6, "RUNNING", "INCOMPLETE") +
			textErrors +
			textSection(0, 0, 0x1, "INCOMPLETE") +
			fmt.Sprintf("  Missing communicator data from %d rank%s\n", 2, "s") +
			// rasClientRunComms (2.24, 2.25): "  The missing rank%s: %s\n"
			fmt.Sprintf("  The missing rank%s: %s\n", "s", "5,6") +
			"\n" + textWarnings,
		wantVersion: "2.25.1",
		wantDone:    true,
		wantComms:   1,
		wantLagging: []int{5, 6},
	}, {
		name: "a rank still initializing",
		text: textPreamble("2.27.3") + textCommunicators("%.3f") +
			textRow(0, 1, 2, "8", 16, 16, "RUNNING", "MISMATCH") +
			textErrors + textWarnings +
			textSection(0, 0, 0x1badb002cafef00d, "MISMATCH") +
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
		text: textPreamble("2.27.3") + textCommunicators("%.3f") +
			textRow(0, 1, 2, "4", 8, 8, "RUNNING", "ERROR") +
			textErrors +
			textSection(0, 0, 0x5, "ERROR") +
			// rasClientRunComms: "  Asynchronous error%s on %d rank%s\n"
			fmt.Sprintf("  Asynchronous error%s on %d rank%s\n", "", 1, "") +
			// rasClientBreakDownErrors: "  Rank %d reported %s -- GPU %s managed by process %d on node %s\n"
			fmt.Sprintf("  Rank %d reported %s -- GPU %s managed by process %d on node %s\n", 3, "Remote process error", "3", 4003, "10.0.0.1") +
			"\n" + textWarnings,
		wantVersion: "2.27.3",
		wantDone:    true,
		wantComms:   1,
		check: func(t *testing.T, r Report) {
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
		text:        textPreamble("2.27.3") + textJobSummary(2, 4, 1) + "\nCommunicators...",
		wantVersion: "2.27.3",
		check: func(t *testing.T, r Report) {
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
		text:        jsonReport(fixtureComm{hash: 0x5eed1e55c0de0001, size: 2, ranks: []fixtureRank{{rank: 0, host: "10.0.0.1", pid: 7, counts: [5]uint64{1, 0, 2, 0, 30}}, {rank: 1, host: "10.0.0.1", pid: 8, dev: 1, counts: [5]uint64{1, 0, 2, 0, 30}}}}),
		wantVersion: "2.29.1",
		wantDone:    true,
		wantComms:   1,
		wantTotal:   2 * 33,
		wantExact:   true,
		check: func(t *testing.T, r Report) {
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
		check: func(t *testing.T, r Report) {
			if got := r.Comms[1].Lagging(); !slices.Equal(got, []int{1}) {
				t.Errorf("Comms[1].Lagging() = %v, want its rank 1", got)
			}
			if r.Comms[0].Errors != "MISMATCH" || r.Comms[0].Nodes != 2 {
				t.Errorf("Comms[0] = %+v, want a MISMATCH on 2 nodes", r.Comms[0])
			}
		},
	}, {
		name: "JSON, an unresponsive rank",
		text: jsonReport(fixtureComm{hash: 0x9, size: 2,
			ranks:   []fixtureRank{{rank: 0, host: "10.1.0.9", pid: 51001}},
			missing: []fixtureMissing{{rank: 1, host: "10.1.0.9", pid: 51002, dev: 1, unresponsive: true}}}),
		wantVersion: "2.29.1",
		wantDone:    true,
		wantComms:   1,
		wantLagging: []int{1},
		wantExact:   true,
		check: func(t *testing.T, r Report) {
			if r.Comms[0].Errors != "INCOMPLETE" || r.MissingProcesses != 1 || len(r.Unreachable) != 1 || r.Unreachable[0].PID != 51002 {
				t.Errorf("report = %+v, want an INCOMPLETE communicator and process 51002 unreachable", r)
			}
		},
	}, {
		name: "JSON, ranks finishing",
		text: jsonReport(fixtureComm{hash: 0x9, size: 3,
			ranks: []fixtureRank{{rank: 0, pid: 1, host: "h"}, {rank: 1, pid: 2, host: "h", dev: 1}, {rank: 2, pid: 3, host: "h", dev: 2, finalizing: true}}}),
		wantVersion: "2.29.1",
		wantDone:    true,
		wantComms:   1,
		wantLagging: []int{2},
		wantExact:   true,
		check: func(t *testing.T, r Report) {
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
			r := Parse(tc.text)
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

func FuzzParse(f *testing.F) {
	f.Add(normalReport())
	f.Add(laggingReport())
	f.Add(jsonLagging())
	f.Add("Group\n1 2 3 4 5 6 7 8\n")
	f.Fuzz(func(t *testing.T, text string) {
		r := Parse(text)
		lag := r.Lagging()
		if !slices.IsSorted(lag) || len(slices.Compact(slices.Clone(lag))) != len(lag) {
			t.Errorf("Lagging() = %v, not sorted and unique", lag)
		}
		r.TotalCollectives()
	})
}
