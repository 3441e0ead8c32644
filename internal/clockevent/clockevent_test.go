package clockevent

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Every reason against go-nvml's constant of the name its comment gives,
// and its name as that constant's suffix in snake_case.
func TestReasonsAreNVMLs(t *testing.T) {
	for _, tc := range []struct {
		r         Reason
		nvml      uint64
		constName string
	}{
		{GpuIdle, nvml.ClocksEventReasonGpuIdle, "ClocksEventReasonGpuIdle"},
		{ApplicationsClocksSetting, nvml.ClocksEventReasonApplicationsClocksSetting, "ClocksEventReasonApplicationsClocksSetting"},
		{SwPowerCap, nvml.ClocksEventReasonSwPowerCap, "ClocksEventReasonSwPowerCap"},
		{HwSlowdown, nvml.ClocksThrottleReasonHwSlowdown, "ClocksThrottleReasonHwSlowdown"},
		{SyncBoost, nvml.ClocksEventReasonSyncBoost, "ClocksEventReasonSyncBoost"},
		{SwThermalSlowdown, nvml.ClocksEventReasonSwThermalSlowdown, "ClocksEventReasonSwThermalSlowdown"},
		{HwThermalSlowdown, nvml.ClocksThrottleReasonHwThermalSlowdown, "ClocksThrottleReasonHwThermalSlowdown"},
		{HwPowerBrakeSlowdown, nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "ClocksThrottleReasonHwPowerBrakeSlowdown"},
		{DisplayClockSetting, nvml.ClocksEventReasonDisplayClockSetting, "ClocksEventReasonDisplayClockSetting"},
		{BoardLimit, nvml.ClocksEventReasonBoardLimit, "ClocksEventReasonBoardLimit"},
		{Reliability, nvml.ClocksEventReasonReliability, "ClocksEventReasonReliability"},
	} {
		if uint64(tc.r) != tc.nvml {
			t.Errorf("%s = %#x, nvml.%s = %#x", tc.r, uint64(tc.r), tc.constName, tc.nvml)
		}
		suffix := regexp.MustCompile(`^Clocks(Event|Throttle)Reason`).ReplaceAllString(tc.constName, "")
		if want := snake(suffix); tc.r.String() != want {
			t.Errorf("nvml.%s is named %q, want %q", tc.constName, tc.r, want)
		}
	}
	if uint64(All) != nvml.ClocksEventReasonAll {
		t.Errorf("All = %#x, nvml.ClocksEventReasonAll = %#x: NVML has reasons this package does not name", uint64(All), uint64(nvml.ClocksEventReasonAll))
	}
}

func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		mask uint64
		want []string
	}{
		{0, nil},
		{uint64(GpuIdle), []string{"gpu_idle"}},
		{uint64(HwThermalSlowdown | SwPowerCap), []string{"sw_power_cap", "hw_thermal_slowdown"}},
		{uint64(Reliability) | 1<<40, []string{"reliability"}}, // a bit NVML may add later
	} {
		if got := Names(tc.mask); !slices.Equal(got, tc.want) {
			t.Errorf("Names(%#x) = %q, want %q", tc.mask, got, tc.want)
		}
	}
	if n := Names(uint64(All)); len(n) != 11 || slices.Contains(n, "") {
		t.Errorf("Names(All) = %q", n)
	}
	if Reason(3).String() != "" || Reason(0).String() != "" {
		t.Error("a value of several bits or none has a name")
	}
}

func TestIsSlowdown(t *testing.T) {
	var slow []string
	for _, n := range Names(uint64(All)) {
		if IsSlowdown(n) {
			slow = append(slow, n)
		}
	}
	want := []string{"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
	if !slices.Equal(slow, want) {
		t.Errorf("slowdowns %q, want %q", slow, want)
	}
	if IsSlowdown("hw_thermal") || IsSlowdown("") {
		t.Error("a name that is not a reason's counts as a slowdown")
	}
}
