package healthcheck

import "testing"

// TestWeightReportLogged_OnlyWhenWeighted: a target whose services use the
// weights (Weighted) logs its weight report (the first, and each change of
// kind); one whose services do not logs none, though the reply carries
// the header and the result still reports the weight.
func TestWeightReportLogged_OnlyWhenWeighted(t *testing.T) {
	t.Parallel()
	headers := []string{"5", "", "7"} // VALID, MISSING, VALID: three kinds in a row
	script := func(i int) (byte, string) { return 'p', headers[i%len(headers)] }
	weighted, plain := httpTarget("w", scripted(t, script)), httpTarget("p", scripted(t, script))
	weighted.Weighted = true
	r := start(t, Options{}, weighted, plain)
	r.results(t, "w", 3)
	ps := r.results(t, "p", 3)
	r.stop(t)
	if ps[0].WeightState == WeightNone {
		t.Errorf("the unweighted target's result has no weight report: %+v", ps[0])
	}
	byTarget := map[string]int{}
	for _, e := range r.logs.FilterMessage("weight report").All() {
		byTarget[e.ContextMap()["target"].(string)]++
	}
	if byTarget["w"] < 3 {
		t.Errorf("weighted target: %d weight report lines, want one per change of kind (>= 3)", byTarget["w"])
	}
	if byTarget["p"] != 0 {
		t.Errorf("unweighted target: %d weight report lines, want none", byTarget["p"])
	}
}
