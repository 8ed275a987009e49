// The dashboard's admin buttons: each POSTs to /admin/jobs/{job}/{action}
// with the token typed into the page, shows the answer, clears the note it
// sent, and refreshes the page (refresh, below). A box's buttons wait for
// their answer: a double click sends one request. Run now sends a key (an
// idempotency key: a key runs once), kept until an answer says what became
// of it: after no answer (a timeout, a lost connection) or a 5xx the run
// may have started, and Run now asks again with the same key, reloads and
// all, so that it runs once at most (while the key's record is kept: the
// job's retention).
// The page reloads itself every data-refresh seconds (5, or ?refresh=N; 0:
// never). While an input is the active element or a note holds text, a
// reload would lose what is being typed: the page is then refreshed in
// place instead, everything but the token and the jobs' action boxes
// replaced from a fresh copy. (The active element, not :focus, which
// matches only while the window has the focus: a user who switches to
// another window for the token would lose the note.)
(function () {
  const token = document.getElementById('token');
  token.value = sessionStorage.getItem('slotcron-admin-token') || '';
  token.addEventListener('input', () => sessionStorage.setItem('slotcron-admin-token', token.value));
  const every = Number(document.body.dataset.refresh);
  // patience: how long a refresh in place waits for the page, body and
  // all, before it gives up (the next tick tries again). Without it, a
  // request the worker never answered (a hung connection, a proxy that
  // drops it) would hold refreshing, and the page would stay stale for as
  // long as the typing went on.
  const patience = Math.max(10, 2 * every) * 1000;
  // answerWithin: how long an action waits for its answer (the worker
  // bounds its own work to 5s), before it says that it got none.
  const answerWithin = 10000;
  // pendingKey: where a job's Run now keeps its key until its outcome is
  // known (per page path too: two dashboards on one origin keep apart).
  const pendingKey = (job) => 'slotcron-trigger-key:' + location.pathname + ':' + job;
  // newKey: a random UUID (crypto.randomUUID needs https or localhost).
  const newKey = () => {
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
    return [h.slice(0, 8), h.slice(8, 12), h.slice(12, 16), h.slice(16, 20), h.slice(20)].join('-');
  };
  const askAgain = 'it may have run. Run now asks again with the same key, which runs once at most';
  let inFlight = 0; // answers awaited: the page is not reloaded meanwhile
  document.querySelectorAll('.actions').forEach((box) => {
    if (sessionStorage.getItem(pendingKey(box.dataset.job))) {
      box.querySelector('.result').textContent = 'an earlier Run now did not learn its outcome: ' + askAgain;
    }
  });
  document.querySelectorAll('.actions button').forEach((button) => {
    button.addEventListener('click', async () => {
      const box = button.closest('.actions');
      const buttons = box.querySelectorAll('button');
      const out = box.querySelector('.result');
      const action = button.dataset.action;
      const body = new URLSearchParams({ note: box.querySelector('.note').value });
      // retry: Run now sends the key of an earlier one whose outcome is
      // not known. settled: the key's outcome is now known; the next Run
      // now takes a new key. (Pause and Resume leave the key alone.)
      let retry = false;
      let settled = () => {};
      if (action === 'trigger') {
        const k = sessionStorage.getItem(pendingKey(box.dataset.job));
        retry = k !== null;
        body.set('key', k || newKey());
        sessionStorage.setItem(pendingKey(box.dataset.job), body.get('key'));
        settled = () => sessionStorage.removeItem(pendingKey(box.dataset.job));
      }
      buttons.forEach((b) => { b.disabled = true; });
      out.textContent = '…';
      inFlight++;
      try {
        const r = await fetch('admin/jobs/' + encodeURIComponent(box.dataset.job) + '/' + action, {
          method: 'POST', headers: { Authorization: 'Bearer ' + token.value }, body: body,
          signal: AbortSignal.timeout(answerWithin),
        });
        const text = await r.text();
        if (!r.ok) {
          // 4xx: refused, nothing done, so a new key's outcome is known (a
          // key sent before stays: its earlier request's is not). 5xx
          // (Redis did not answer the worker, say): the run may have
          // started, so the key stays.
          if (r.status < 500 && !retry) settled();
          out.textContent = r.status + ': ' + text + (r.status >= 500 && action === 'trigger' ? ' (' + askAgain + ')' : '');
          return;
        }
        const a = JSON.parse(text);
        settled();
        const on = (who) => (who ? ' on ' + who : '');
        if (action !== 'trigger') {
          out.textContent = a.action + (a.changed ? 'd' : ': no change');
        } else if (retry && a.outcome === 'lost' && (a.state === 'done' || a.state === 'running')) {
          out.textContent = 'manual slot ' + a.id + ': ' + a.state + on(a.holder) + ' (the key was sent before: it runs once)';
        } else if (retry && a.outcome === 'lost') {
          out.textContent = 'manual slot ' + a.id + ': ' + a.state + on(a.holder) + ' (the key was sent before, and did not run: Run now again takes a new key)';
        } else {
          out.textContent = 'manual slot ' + a.id + ': ' + a.outcome + on(a.replica) + (a.holder && a.holder !== a.replica ? ' (' + a.holder + ')' : '');
        }
        box.querySelector('.note').value = ''; // sent: it goes with the action
        setTimeout(refresh, 1500);
      } catch (e) {
        const why = e.name === 'TimeoutError' ? 'no answer in ' + answerWithin / 1000 + 's'
          : e.name === 'SyntaxError' ? 'no readable answer (' + e.message + ')' : 'no answer (' + e + ')';
        out.textContent = action === 'trigger'
          ? 'Run now got ' + why + ': ' + askAgain
          : action + ' got ' + why + ': it may have been done. Asking again is safe';
      } finally {
        inFlight--;
        buttons.forEach((b) => { b.disabled = false; });
      }
    });
  });
  // kept: what a refresh in place leaves as it is, typed text and all; and
  // this script, rather than a copy of it (which the browser would not run
  // again: a DOMParser's scripts are marked as started).
  const kept = '.actions, label.token, body > script';
  // holds: whether el is kept, or holds something kept.
  const holds = (el) => el.matches(kept) || el.querySelector(kept) !== null;
  // key names an element that holds something kept, to find its
  // counterpart in the fresh copy: a job's by its name.
  const key = (el) => {
    const a = el.matches('.actions') ? el : el.querySelector('.actions');
    return el.tagName + '.' + el.className + (a ? ':' + a.dataset.job : '');
  };
  // plan matches, under the live element and its fresh copy, the children
  // that hold something kept, in order, down to the kept ones: a list of
  // [live, fresh] pairs whose other children are replaced, or null when
  // one has no counterpart (a job gone or moved: the page stays as it is
  // until the typing ends and it reloads).
  const plan = (live, fresh, pairs) => {
    pairs.push([live, fresh]);
    if (live.matches(kept)) return pairs;
    const others = [...fresh.children].filter(holds);
    for (const c of [...live.children].filter(holds)) {
      const f = others.shift();
      if (!f || key(f) !== key(c) || !plan(c, f, pairs)) return null;
    }
    return others.length === 0 ? pairs : null;
  };
  // replaceAround gives live the children of fresh, but for those that
  // hold something kept, which stay where they are (moving the active
  // input would take the focus from it).
  const replaceAround = (live, fresh) => {
    const stay = new Set([...live.children].filter(holds));
    [...live.childNodes].filter((n) => !stay.has(n)).forEach((n) => n.remove());
    let next = live.firstChild;
    for (const n of [...fresh.childNodes]) {
      if (n.nodeType === Node.ELEMENT_NODE && holds(n)) {
        next = next.nextSibling; // its live counterpart, matched by plan
      } else {
        live.insertBefore(document.importNode(n, true), next);
      }
    }
  };
  // refresh reloads the page, or refreshes it in place while an input is
  // active, a note holds text or an action awaits its answer (after an
  // action too: a note typed for another job, or the token, stays).
  function refresh() {
    const active = document.activeElement;
    const typing = (active && active.tagName === 'INPUT') || inFlight > 0 ||
      [...document.querySelectorAll('.actions .note')].some((n) => n.value !== '');
    if (typing) refreshInPlace();
    else location.reload();
  }
  let refreshing = false;
  const refreshInPlace = async () => {
    if (refreshing) return;
    refreshing = true;
    try {
      const r = await fetch(location.href, { cache: 'no-store', signal: AbortSignal.timeout(patience) });
      if (!r.ok) return;
      const doc = new DOMParser().parseFromString(await r.text(), 'text/html');
      const pairs = plan(document.body, doc.body, []);
      if (!pairs) return;
      for (const [live, fresh] of pairs) {
        if (!live.matches(kept)) replaceAround(live, fresh);
      }
      document.title = doc.title;
    } catch (e) {
      // the worker did not answer in time: the page stays as it is, and is
      // tried again
    } finally {
      refreshing = false;
    }
  };
  if (every > 0) {
    setInterval(refresh, every * 1000);
  }
})();
