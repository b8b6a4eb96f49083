package otellimit

// WaitSources waits until the instruments of source metrics first
// reported after New are made and observed.
func WaitSources(m *Metrics) {
	if m.src != nil {
		m.src.wg.Wait()
	}
}
