window.__errors = [];
window.addEventListener('error', function (e) {
  window.__errors.push(String(e.message || e));
  document.documentElement.setAttribute('data-errors', window.__errors.join(' | '));
});
