// Links of the MLflow UI land on the portal's pages. The official client prints
// `<tracking URI>/#/experiments/<id>/runs/<run id>`; the fragment never reaches the server, so this script (loaded by
// every page, before it renders: the login page too, where an anonymous visit is sent with the fragment kept) reads
// it and asks the server where that object's page is (`data-target`, apps/models/views/mlflow_links.py).
(function () {
  "use strict";
  var script = document.currentScript;
  var hash = window.location.hash;
  if (!script || hash.indexOf("#/") !== 0) {
    return;
  }
  var params = null;
  var match = /^#\/experiments\/(\d+)(?:\/runs\/([0-9a-fA-F]{32}))?(?:[/?]|$)/.exec(hash);
  if (match) {
    params = match[2] ? { run: match[2] } : { experiment: match[1] };
  } else {
    match = /^#\/models\/([^/?]+)(?:\/versions\/(\d+))?(?:[/?]|$)/.exec(hash);
    if (match) {
      try {
        params = { model: decodeURIComponent(match[1]) };
      } catch (error) {
        return; // a malformed escape: not a link we know
      }
      if (match[2]) {
        params.version = match[2];
      }
    }
  }
  if (params) {
    window.location.replace(script.dataset.target + "?" + new URLSearchParams(params).toString());
  }
})();
