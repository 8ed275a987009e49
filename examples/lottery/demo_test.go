package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSlotLinesAlign: at 3, 5 and 20 replicas, whoever wins, the fence and
// the winners start in the same column on every line.
func TestSlotLinesAlign(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, n := range []int{3, 5, 20} {
		col := columns(n)
		var lines []string
		for _, win := range []int{1, n / 2, n} {
			v := &slotView{winner: fmt.Sprintf("replica-%d", win), fence: 1795459398000454 + int64(win)}
			for i := 1; i <= n; i++ {
				if i != win {
					v.lost = append(v.lost, fmt.Sprintf("replica-%d", i))
				}
			}
			lines = append(lines, slotLine(at, v, "user-0001, ... (10)", col, time.TimeOnly))
		}
		lines = append(lines, slotLine(at, nil, "no draw", col, time.TimeOnly))
		for _, field := range []string{"lost ", "fence ", "winners "} {
			first := strings.Index(lines[0], field)
			for _, l := range lines {
				if strings.Index(l, field) != first {
					t.Errorf("%d replicas: %q is not in the same column:\n%s", n, field, strings.Join(lines, "\n"))
					break
				}
			}
		}
		if n <= 5 && !strings.Contains(lines[0], "replica-2, replica-3") || n > 5 && !strings.Contains(lines[0], "lost 19 replicas") {
			t.Errorf("%d replicas: the losers are not shown as they should be:\n%s", n, lines[0])
		}
	}
}
