package mig

import "testing"

// TestCatalog_Loads: the embedded data file parses and pass their checks.
func TestCatalog_Loads(t *testing.T) {
	if _, err := loadCatalog(); err != nil {
		t.Fatalf("products.yaml: %v", err)
	}
}
