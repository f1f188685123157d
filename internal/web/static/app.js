// gpufleet dashboard: live regions and filters. Hand-written, no
// dependencies. Pages work without it; it only keeps them fresh.
//
// An element with data-live="/ui/..." is refreshed every data-interval
// milliseconds with the HTML fragment at that URL (or its text, with
// data-format="text"). A 401 means the session ended: go to the login
// page. Polling pauses while the tab is hidden.
(function () {
  'use strict';

  var stamp = document.getElementById('updated');

  function setStatus(ok) {
    if (!stamp) { return; }
    var box = stamp.parentNode;
    if (ok) {
      box.classList.remove('stale');
      stamp.textContent = 'Live · updated ' + new Date().toLocaleTimeString();
    } else {
      box.classList.add('stale');
      stamp.textContent = 'Live updates failing; retrying…';
    }
  }

  function toLogin() {
    var next = location.pathname + location.search;
    location.assign('/login?next=' + encodeURIComponent(next));
  }

  function refresh(el) {
    if (el.dataset.busy === '1') { return Promise.resolve(); }
    el.dataset.busy = '1';
    var text = el.dataset.format === 'text';
    return fetch(el.dataset.live, {
      credentials: 'same-origin',
      cache: 'no-store',
      headers: { 'Accept': text ? 'text/plain' : 'text/html' }
    }).then(function (r) {
      if (r.status === 401) { toLogin(); return null; }
      if (!r.ok) { throw new Error('HTTP ' + r.status); }
      return r.text();
    }).then(function (body) {
      if (body === null) { return; }
      if (text) {
        var follow = el.dataset.follow === '1' && el.scrollTop + el.clientHeight >= el.scrollHeight - 24;
        if (el.textContent !== body) { el.textContent = body; }
        if (follow) { el.scrollTop = el.scrollHeight; }
      } else {
        el.innerHTML = body;
        setStatus(true);
      }
    }).catch(function () {
      setStatus(false);
    }).finally(function () {
      el.dataset.busy = '';
    });
  }

  function schedule(el) {
    var every = parseInt(el.dataset.interval, 10) || 3000;
    function tick() {
      var p = document.hidden ? Promise.resolve() : refresh(el);
      p.then(function () { el._timer = setTimeout(tick, every); });
    }
    el._timer = setTimeout(tick, el.dataset.format === 'text' ? 0 : every);
  }

  document.querySelectorAll('[data-live]').forEach(schedule);
  document.addEventListener('visibilitychange', function () {
    if (!document.hidden) {
      document.querySelectorAll('[data-live]').forEach(function (el) { refresh(el); });
    }
  });

  // Filter forms (data-live-filter="ID") change the live region's URL in
  // place: no reload, and the address bar keeps the filters.
  document.querySelectorAll('form[data-live-filter]').forEach(function (form) {
    var target = document.getElementById(form.dataset.liveFilter);
    if (!target) { return; }
    var base = target.dataset.live.split('?')[0];
    function apply(ev) {
      if (ev) { ev.preventDefault(); }
      var q = new URLSearchParams();
      new FormData(form).forEach(function (v, k) { if (v !== '') { q.set(k, v); } });
      var qs = q.toString();
      target.dataset.live = base + (qs ? '?' + qs : '');
      history.replaceState(null, '', form.getAttribute('action') + (qs ? '?' + qs : ''));
      refresh(target);
    }
    form.addEventListener('submit', apply);
    form.querySelectorAll('select').forEach(function (s) { s.addEventListener('change', function () { apply(); }); });
  });
})();
