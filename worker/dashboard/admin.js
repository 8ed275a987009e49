// The dashboard's admin buttons: each POSTs to /admin/jobs/{job}/{action}
// with the token typed into the page, shows the answer, and reloads the page.
// The page reloads itself every data-refresh seconds (5, or ?refresh=N; 0:
// never), except while an input is the active element or a note holds text:
// a reload would lose what is being typed. (The active element, not :focus,
// which matches only while the window has the focus: a user who switches
// to another window for the token would lose the note.)
(function () {
  const token = document.getElementById('token');
  token.value = sessionStorage.getItem('slotcron-admin-token') || '';
  token.addEventListener('input', () => sessionStorage.setItem('slotcron-admin-token', token.value));
  document.querySelectorAll('.actions button').forEach((button) => {
    button.addEventListener('click', async () => {
      const box = button.closest('.actions');
      const out = box.querySelector('.result');
      out.textContent = '…';
      const body = new URLSearchParams({ note: box.querySelector('.note').value });
      try {
        const r = await fetch('admin/jobs/' + encodeURIComponent(box.dataset.job) + '/' + button.dataset.action, {
          method: 'POST', headers: { Authorization: 'Bearer ' + token.value }, body: body,
        });
        const text = await r.text();
        if (!r.ok) {
          out.textContent = r.status + ': ' + text;
          return;
        }
        const a = JSON.parse(text);
        out.textContent = button.dataset.action === 'trigger'
          ? 'manual slot ' + a.id + ': ' + a.outcome + ' on ' + a.replica + (a.holder ? ' (' + a.holder + ')' : '')
          : a.action + (a.changed ? 'd' : ': no change');
        setTimeout(() => location.reload(), 1500);
      } catch (e) {
        out.textContent = String(e);
      }
    });
  });
  const every = Number(document.body.dataset.refresh);
  if (every > 0) {
    setInterval(() => {
      const active = document.activeElement;
      const typing = (active && active.tagName === 'INPUT') ||
        [...document.querySelectorAll('.actions .note')].some((n) => n.value !== '');
      if (!typing) location.reload();
    }, every * 1000);
  }
})();
