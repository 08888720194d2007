// dpicl web UI: live progress of queued / running audit jobs. Polls the JSON API
// (GET /v1/audits/{id}, authenticated by the session cookie) and reloads the page when a job
// finishes, so that the server renders its verdict and plots. No framework, no build step.
(function () {
  "use strict";
  var ACTIVE = { queued: true, running: true };

  function poll(el) {
    var id = el.getAttribute("data-job-id");
    fetch("/v1/audits/" + encodeURIComponent(id), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        var ra = parseFloat(r.headers.get("Retry-After") || "1");
        return r.json().then(function (job) { return { job: job, wait: ra }; });
      })
      .then(function (res) {
        var job = res.job;
        var pct = Math.round(1000 * (job.progress.fraction || 0)) / 10;
        var status = el.querySelector("[data-role=status]");
        var bar = el.querySelector("[data-role=progress]");
        var msg = el.querySelector("[data-role=message]");
        el.setAttribute("data-status", job.status);
        status.textContent = job.status;
        status.className = "badge s-" + job.status;
        bar.value = pct;
        bar.textContent = pct + "%";
        msg.textContent = pct + "%" + (job.progress.message ? " · " + job.progress.message : "");
        var queue = el.querySelector("[data-role=queue]");
        if (queue) {
          // A queued job: its place and the slots it waits for; gone once it runs.
          queue.textContent = job.queue ? "queue position " + job.queue.position + ": waits for " + job.queue.waiting_for : "";
          queue.hidden = !job.queue;
        }
        if (ACTIVE[job.status]) {
          // The API's Retry-After grows with the job's age; poll at least every 5 s.
          setTimeout(function () { poll(el); }, Math.min(5000, Math.max(500, 1000 * res.wait)));
        } else {
          window.location.reload();
        }
      })
      .catch(function () { setTimeout(function () { poll(el); }, 5000); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var els = document.querySelectorAll("[data-job-id]");
    for (var i = 0; i < els.length; i++) {
      if (ACTIVE[els[i].getAttribute("data-status")]) { poll(els[i]); }
    }
  });
})();
