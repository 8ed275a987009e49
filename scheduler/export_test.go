package scheduler

import "time"

// BackstopAfter is backstopAfter, for the routing tests.
const BackstopAfter = backstopAfter

// RunningSweepEvery is runningSweepEvery, for the tests of settling.
const RunningSweepEvery = runningSweepEvery

// Rank is rank, for the routing tests: where self stands in the rendezvous
// order of the slot of job at at, over ids (0: its preferred replica).
func Rank(ids []string, self, job string, at time.Time) int { return rank(ids, self, job, at) }
