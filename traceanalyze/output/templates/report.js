// Copy buttons: copy the text of the element named by data-copy (works from file://).
(function () {
  "use strict";
  function fallbackCopy(text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    document.body.removeChild(area);
    return ok;
  }
  function flash(button, label) {
    button.textContent = label;
    window.setTimeout(function () { button.textContent = "Copy"; }, 1400);
  }
  document.querySelectorAll("button.copy").forEach(function (button) {
    button.addEventListener("click", function () {
      var target = document.getElementById(button.getAttribute("data-copy"));
      if (!target) { return; }
      var text = target.textContent;
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(
          function () { flash(button, "Copied"); },
          function () { flash(button, fallbackCopy(text) ? "Copied" : "Select & copy"); });
      } else {
        flash(button, fallbackCopy(text) ? "Copied" : "Select & copy");
      }
    });
  });
})();
