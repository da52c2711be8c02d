package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat; it
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds returns the user plus system CPU time a process has used.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count fields
	// from after its closing parenthesis.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// utime and stime are fields 14 and 15 of stat, 12 and 13 after the
	// name.
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var total float64
	for _, f := range fields[11:13] {
		t, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, err
		}
		total += float64(t)
	}
	return total / clockTicks, nil
}

// cpuMeter measures the CPU time named processes use between start and
// stop.
type cpuMeter struct {
	pids  map[string]int
	start map[string]float64
}

func newCPUMeter(pids map[string]int) *cpuMeter {
	m := &cpuMeter{pids: pids, start: map[string]float64{}}
	for name, pid := range pids {
		m.start[name], _ = cpuSeconds(pid)
	}
	return m
}

// used returns the CPU seconds each process used since newCPUMeter.
func (m *cpuMeter) used() map[string]float64 {
	out := map[string]float64{}
	for name, pid := range m.pids {
		if t, err := cpuSeconds(pid); err == nil {
			out[name] = t - m.start[name]
		}
	}
	return out
}
