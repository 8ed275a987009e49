// Package mutants holds the mutation run's list (mutants.tsv, run by
// run.sh) and a test that keeps the list in step with the code.
package mutants
