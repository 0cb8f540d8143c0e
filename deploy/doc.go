// Package deploy holds no Go code of the daemon: its folder has the files
// an operator installs beside it (grafana/lmwarden.json, a Grafana
// dashboard; prometheus/, a scrape configuration and alert rules with
// their promtool unit tests). Its test checks them against the real
// thing: promtool on the rules, every metric the dashboard and the rules
// name exported by the warden or by the simulated vLLM, and every
// dashboard query answered by a real Prometheus scraping both.
package deploy
